// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { screen } from "@testing-library/react";
import { renderApp } from "../../test/render";
import { host, json, routeFetch } from "../../test/fixtures";
import { setSession } from "../../api/session";
import type { PlanDetail } from "../../api/types";
import { planKind } from "./PlanPage";
import { shapePlan, type AgentPlan } from "./planModel";

describe("plan page", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("says a made-up plan id is not a plan, without asking the API or showing a validation message", async () => {
    setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
    // What the API answers for a malformed id: a 422 with pydantic's validation detail.
    const routes = routeFetch({
      "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
      "/api/v1/hosts/host-1": () => json(host()),
      "/api/v1/hosts/host-1/plans/made-up": () =>
        json(
          {
            detail: [
              {
                type: "uuid_parsing",
                loc: ["path", "plan_id"],
                msg: "Input should be a valid UUID, invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], found `m` at 1",
              },
            ],
          },
          422,
        ),
    });
    vi.stubGlobal("fetch", routes.fetch);
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/hosts/host-1/plans/made-up");
    expect(await screen.findByRole("heading", { level: 1, name: "Plan not found" })).toBeInTheDocument();
    expect(screen.getByRole("alert")).toHaveTextContent("“made-up” is not a plan id");
    expect(screen.queryByText(/valid UUID|urn:uuid/)).toBeNull();
  });

  it("says so when the host has no plan with a well-formed id", async () => {
    setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
    const id = "0b6f4c1e-8a3d-4f7a-9c2e-5d1b7e9a4f20";
    vi.stubGlobal(
      "fetch",
      routeFetch({
        "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
        [`/api/v1/hosts/host-1/plans/${id}`]: () => json({ detail: "Plan not found" }, 404),
      }).fetch,
    );
    vi.stubGlobal("WebSocket", undefined);
    renderApp(`/hosts/host-1/plans/${id}`);
    expect(await screen.findByRole("heading", { level: 1, name: "Plan not found" })).toBeInTheDocument();
    expect(screen.getByRole("alert")).toHaveTextContent(`This host has no plan ${id}.`);
  });

  it("labels a hot-set plan with its functions and those kept in place", () => {
    const base = { hot_set: true, members: ["a", "b", "c"], root_name: "a", body_etag: null } as unknown as PlanDetail;
    expect(planKind(base, null)).toBe("whole hot set (being sampled and planned)");
    const made = { ...base, body_etag: '"p.1"' } as unknown as PlanDetail;
    // The record says how many functions; those kept in place come with the shaped body.
    expect(planKind(made, null)).toBe("whole hot set: 3 functions, first laid out a");
    const view = shapePlan({ kept_in_place: [{ function: "loop" }] } as unknown as AgentPlan, false);
    expect(planKind(made, view)).toBe("whole hot set: 3 functions, first laid out a; 1 kept in place");
    expect(planKind({ ...made, hot_set: false }, view)).toBe("one root and its hot callees");
  });
  it("polls the plan's record and reads its body once, shaped off the page's task", async () => {
    setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
    const id = "0b6f4c1e-8a3d-4f7a-9c2e-5d1b7e9a4f20";
    const record = {
      id,
      host_id: "host-1",
      target_id: "p42-7",
      root_name: "a",
      hot_set: true,
      members: ["a", "b", "c"],
      state: "ready",
      estimated: false,
      body_etag: '"p.1"',
      comparison: null,
      interleaved: null,
    } as unknown as PlanDetail;
    const body = {
      root: "a",
      status: "ok",
      group: [],
      kept_in_place: [
        { function: "loop", address: "0x10", rule: "kept" },
        { function: "spin", address: "0x20", rule: "kept" },
      ],
      profile: { source: "2 s of exact block counts (inline counters) in process 42" },
    };
    const routes = routeFetch({
      "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
      "/api/v1/hosts/host-1": () => json(host()),
      [`/api/v1/hosts/host-1/plans/${id}`]: () => json(record),
      [`/api/v1/hosts/host-1/plans/${id}/body`]: () => json(body),
      [`/api/v1/hosts/host-1/plans/${id}/audit`]: () => json([]),
    });
    vi.stubGlobal("fetch", routes.fetch);
    vi.stubGlobal("WebSocket", undefined);
    const { queryClient } = renderApp(`/hosts/host-1/plans/${id}`);
    const kind = await screen.findByTestId("plan-kind");
    await vi.waitFor(() =>
      expect(kind).toHaveTextContent("whole hot set: 3 functions, first laid out a; 2 kept in place"),
    );
    expect(screen.getByText("exact (inline counters)")).toBeInTheDocument();
    // The record polled again (as the page's interval does): the body is not read again.
    await queryClient.refetchQueries({ queryKey: ["host", "host-1", "plan", id] });
    await queryClient.refetchQueries({ queryKey: ["host", "host-1", "plan", id] });
    const reads = (path: string) => routes.requests.filter((r) => new URL(r.url, "http://x").pathname === path);
    expect(reads(`/api/v1/hosts/host-1/plans/${id}`).length).toBeGreaterThanOrEqual(3);
    expect(reads(`/api/v1/hosts/host-1/plans/${id}/body`)).toHaveLength(1);
  });

  it("offers to cancel a running comparison (an agent away would hold it) and asks the command's cancel", async () => {
    setSession({ token: "t", user: { id: "u", username: "op", role: "operator" } });
    const id = "0b6f4c1e-8a3d-4f7a-9c2e-5d1b7e9a4f20";
    const cmd = "5d1b7e9a-4f20-4f7a-9c2e-0b6f4c1e8a3d";
    const plan = {
      id,
      host_id: "host-1",
      target_id: "pid:42",
      root_name: "work",
      hot_set: false,
      members: ["work"],
      state: "installed",
      body_etag: null,
      estimated: false,
      interleaved: {
        id: "c1",
        command_id: cmd,
        requested_by: "op",
        guard: true,
        pairs: 6,
        window_seconds: 1,
        state: "running",
        progress: 0.25,
        message: "window 3 of 12",
        error: null,
        windows: [],
        pair_shares: [],
        summary: null,
        guard_action: null,
        guard_reason: null,
      },
    } as unknown as PlanDetail;
    const routes = routeFetch({
      "/api/v1/auth/me": () => json({ id: "u", username: "op", role: "operator" }),
      "/api/v1/hosts/host-1": () => json(host()),
      [`/api/v1/hosts/host-1/plans/${id}`]: () => json(plan),
      [`/api/v1/hosts/host-1/plans/${id}/audit`]: () => json([]),
      [`POST /api/v1/hosts/host-1/commands/${cmd}/cancel`]: () =>
        json({ id: cmd, kind: "compare_plan", state: "running", cancel_requested: true }),
    });
    vi.stubGlobal("fetch", routes.fetch);
    vi.stubGlobal("WebSocket", undefined);
    renderApp(`/hosts/host-1/plans/${id}`);
    const compareAgain = await screen.findByRole("button", { name: "Compare again" });
    expect(compareAgain).toBeDisabled();
    (await screen.findByRole("button", { name: "Cancel comparison" })).click();
    await vi.waitFor(() =>
      expect(routes.requests.some((r) => r.method === "POST" && r.url.endsWith(`/commands/${cmd}/cancel`))).toBe(true),
    );
  });
});
