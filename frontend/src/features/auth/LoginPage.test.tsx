// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { renderApp } from "../../test/render";
import { host, json, routeFetch } from "../../test/fixtures";
import { getSession } from "../../api/session";

describe("login", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("sends an anonymous visitor to the login form, shows a rejected password, then signs in", async () => {
    const { fetch, requests } = routeFetch({
      "POST /api/v1/auth/login": async (req) => {
        const body = await req.json();
        if (body.password !== "s3cret") return json({ detail: "Incorrect username or password" }, 401);
        return json({
          access_token: "tok",
          token_type: "bearer",
          user: { id: "u1", username: "admin", role: "admin" },
        });
      },
      "/api/v1/auth/me": () => json({ id: "u1", username: "admin", role: "admin" }),
      "/api/v1/hosts": () => json([host()]),
    });
    vi.stubGlobal("fetch", fetch);
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/");
    const user = userEvent.setup();
    await user.type(screen.getByLabelText("Username"), "admin");
    await user.type(screen.getByLabelText("Password"), "wrong");
    await user.click(screen.getByRole("button", { name: "Sign in" }));
    expect(await screen.findByText("Incorrect username or password")).toBeInTheDocument();
    expect(getSession()).toBeNull();

    await user.clear(screen.getByLabelText("Password"));
    await user.type(screen.getByLabelText("Password"), "s3cret");
    await user.click(screen.getByRole("button", { name: "Sign in" }));
    expect(await screen.findByRole("heading", { name: "Hosts" })).toBeInTheDocument();
    expect(getSession()?.token).toBe("tok");
    // The page's heading shows before its first request is sent (a loaded machine ran the check between).
    await vi.waitFor(() => expect(requests.some((r) => r.headers.get("Authorization") === "Bearer tok")).toBe(true));

    await user.click(screen.getByRole("button", { name: "Sign out" }));
    expect(await screen.findByRole("button", { name: "Sign in" })).toBeInTheDocument();
    expect(getSession()).toBeNull();
  });
});
