// SPDX-License-Identifier: Apache-2.0
import { describe, expect, it } from "vitest";
import { ApiError, createApiClient, errorDetail, unwrap } from "./client";
import { getSession, onSessionChange, setSession } from "./session";
import { json, routeFetch } from "../test/fixtures";

describe("API client", () => {
  it("sends the bearer token of the session", async () => {
    setSession({ token: "tok-123", user: { id: "u1", username: "admin", role: "admin" } });
    const { fetch, requests } = routeFetch({ "/api/v1/hosts": () => json([]) });
    const client = createApiClient({ fetch });
    await expect(unwrap(client.GET("/api/v1/hosts"))).resolves.toEqual([]);
    expect(requests[0].headers.get("Authorization")).toBe("Bearer tok-123");
  });

  it("sends no Authorization header without a session", async () => {
    const { fetch, requests } = routeFetch({ "/api/v1/hosts": () => json([]) });
    await unwrap(createApiClient({ fetch }).GET("/api/v1/hosts"));
    expect(requests[0].headers.has("Authorization")).toBe(false);
  });

  it("ends the session on any 401, so every screen returns to the login page", async () => {
    setSession({ token: "expired", user: null });
    const seen: unknown[] = [];
    const off = onSessionChange((s) => seen.push(s));
    const { fetch } = routeFetch({ "/api/v1/hosts": () => json({ detail: "Could not validate credentials" }, 401) });
    const err = await unwrap(createApiClient({ fetch }).GET("/api/v1/hosts")).then(
      () => {
        throw new Error("expected a failure");
      },
      (e: unknown) => e as ApiError,
    );
    off();
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 401, message: "Could not validate credentials" });
    expect(getSession()).toBeNull();
    expect(seen).toEqual([null]);
  });

  it("keeps the session when the login itself is rejected", async () => {
    setSession({ token: "still-valid", user: null });
    const { fetch } = routeFetch({
      "POST /api/v1/auth/login": () => json({ detail: "Incorrect username or password" }, 401),
    });
    const err = await unwrap(
      createApiClient({ fetch }).POST("/api/v1/auth/login", { body: { username: "a", password: "b" } }),
    ).then(
      () => {
        throw new Error("expected a failure");
      },
      (e: unknown) => e as ApiError,
    );
    expect(err.message).toBe("Incorrect username or password");
    expect(getSession()?.token).toBe("still-valid");
  });

  it("turns server errors and network failures into readable messages", async () => {
    const { fetch } = routeFetch({
      "/api/v1/hosts/h/functions/1/instructions": () => json({ detail: "Host is offline" }, 503),
    });
    const client = createApiClient({ fetch });
    const err = await unwrap(
      client.GET("/api/v1/hosts/{host_id}/functions/{function_id}/instructions", {
        params: { path: { host_id: "h", function_id: 1 } },
      }),
    ).then(
      () => {
        throw new Error("expected a failure");
      },
      (e: unknown) => e as ApiError,
    );
    expect(err).toMatchObject({ status: 503, message: "Host is offline" });

    const down = createApiClient({ fetch: () => Promise.reject(new TypeError("connection refused")) });
    const netErr = await unwrap(down.GET("/api/v1/hosts")).then(
      () => {
        throw new Error("expected a failure");
      },
      (e: unknown) => e as ApiError,
    );
    expect(netErr).toMatchObject({ status: 0 });
    expect(netErr.message).toMatch(/did not answer.*connection refused/);
  });

  it("summarizes FastAPI validation errors", () => {
    expect(
      errorDetail({ detail: [{ loc: ["query", "limit"], msg: "Input should be less than or equal to 100000" }] }, 422),
    ).toBe("limit: Input should be less than or equal to 100000");
    expect(errorDetail(null, 500)).toBe("Request failed with status 500");
  });
});
