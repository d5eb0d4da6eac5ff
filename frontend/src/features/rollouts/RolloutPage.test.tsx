// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { renderApp } from "../../test/render";
import { host, json, routeFetch } from "../../test/fixtures";
import { setSession } from "../../api/session";
import type { PlanDetail, RolloutDetail, RolloutHost } from "../../api/types";

const RID = "7a1c2e3f-4b5d-4e6f-8a9b-0c1d2e3f4a5b";
const PID = "0b6f4c1e-8a3d-4f7a-9c2e-5d1b7e9a4f20";

function rhost(id: string, wave: number, over: Partial<RolloutHost> = {}): RolloutHost {
  return {
    host_id: id,
    hostname: id,
    online: true,
    wave,
    target_id: "p100-1",
    plan_id: null,
    plan_state: null,
    state: "pending",
    reason: null,
    offline_since: null,
    updated_at: "2026-11-28T10:00:00Z",
    guard: null,
    ...over,
  };
}

function rollout(over: Partial<RolloutDetail> = {}): RolloutDetail {
  return {
    id: RID,
    plan_id: PID,
    plan_host_id: "h0",
    kind: "process",
    build_id: "ab".repeat(20),
    code_sha256: "c".repeat(64),
    requested_by: "op",
    labels: { role: "db" },
    wave_sizes: [1, 2],
    window_s: 5,
    guard_pairs: 6,
    guard_window_seconds: 1,
    offline_wait_s: 60,
    state: "halted",
    reason: "h2: slower: +10.0% of the samples in the plan's code; reverted by the guard",
    wave: 1,
    host_count: 3,
    created_at: "2026-11-28T10:00:00Z",
    updated_at: "2026-11-28T10:01:00Z",
    finished_at: null,
    hosts: [
      rhost("h0", 0, {
        state: "installed",
        plan_id: "11111111-2222-4333-8444-555555555555",
        plan_state: "installed",
        guard: {
          state: "done",
          action: "kept",
          verdict: "faster",
          share_original: 0.3,
          share_installed: 0.25,
          change: -0.05,
          interval: [-0.07, -0.03],
          confidence: 0.95,
        },
      }),
      rhost("h1", 1, { state: "installed" }),
      rhost("h2", 1, {
        state: "reverted",
        reason: "slower",
        guard: {
          state: "done",
          action: "reverted",
          verdict: "slower",
          share_original: 0.2,
          share_installed: 0.22,
          change: 0.1,
          interval: [0.08, 0.12],
          confidence: 0.95,
        },
      }),
    ],
    waves: [
      { wave: 0, size: 1, states: { installed: 1 } },
      { wave: 1, size: 2, states: { installed: 1, reverted: 1 } },
    ],
    ...over,
  };
}

function stub(role: "operator" | "viewer", first: RolloutDetail = rollout()) {
  setSession({ token: "t", user: { id: "u", username: "op", role } });
  let r = first; // as the backend keeps it: a revert changes what later reads get
  const routes = routeFetch({
    "/api/v1/auth/me": () => json({ id: "u", username: "op", role }),
    [`/api/v1/rollouts/${RID}`]: () => json(r),
    [`/api/v1/rollouts/${RID}/audit`]: () =>
      json([
        { at: "2026-11-28T10:00:00Z", actor: "op", action: "rollout_start", detail: { rollout_id: RID, hosts: 3 } },
        {
          at: "2026-11-28T10:01:00Z",
          actor: "system",
          action: "rollout_halt",
          detail: { rollout_id: RID, reason: "h2 slower", host_id: null },
        },
      ]),
    [`POST /api/v1/rollouts/${RID}/revert`]: () => {
      r = { ...r, state: "reverting", reason: "revert by op" };
      return json(r);
    },
  });
  vi.stubGlobal("fetch", routes.fetch);
  vi.stubGlobal("WebSocket", undefined);
  return routes.requests;
}

describe("roll-out page", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("shows a halted roll-out: why, the host that needs attention with its guard's figures, waves, audit", async () => {
    stub("operator");
    renderApp(`/rollouts/${RID}`);
    expect(await screen.findByTestId("rollout-state")).toHaveTextContent("halted");
    expect(screen.getByRole("alert")).toHaveTextContent("Halted: h2: slower");
    expect(screen.getByTestId("rollout-progress")).toHaveTextContent("3 of 3 hosts answered: 2 installed, 1 reverted");
    const attention = screen.getByRole("table", { name: "Hosts that need attention" });
    const rows = within(attention).getAllByRole("row");
    expect(rows).toHaveLength(2);
    expect(rows[1]).toHaveTextContent("h2");
    expect(rows[1]).toHaveTextContent(
      "slower; reverted by the guard · +10.0% (95% interval +8.0% .. +12.0%) · 20.0% → 22.0% of samples",
    );
    const canary = screen.getByRole("table", { name: "Canary · 1 host" });
    expect(canary).toHaveTextContent("faster");
    expect(within(canary).getByRole("link", { name: "installed" })).toHaveAttribute(
      "href",
      "/hosts/h0/plans/11111111-2222-4333-8444-555555555555",
    );
    expect(screen.getByRole("table", { name: "Wave 1 · 2 hosts" })).toHaveTextContent("h1");
    expect(screen.getByRole("link", { name: "← plan" })).toHaveAttribute("href", `/hosts/h0/plans/${PID}`);
    const audit = await screen.findByTestId("rollout-audit");
    await waitFor(() => expect(within(audit).getAllByRole("row")).toHaveLength(3));
    expect(audit).toHaveTextContent("halt");
    expect(audit).toHaveTextContent("reason: h2 slower");
    expect(audit).not.toHaveTextContent(RID);
    expect(audit).not.toHaveTextContent("host id"); // an empty field is not shown
  });

  it("lets an operator revert everywhere with one click; pause and resume say why not", async () => {
    const requests = stub("operator");
    renderApp(`/rollouts/${RID}`);
    const revert = await screen.findByRole("button", { name: "Revert everywhere" });
    expect(screen.getByRole("button", { name: "Pause" })).toBeDisabled();
    expect(screen.getByRole("button", { name: "Pause" })).toHaveAttribute(
      "title",
      "the roll-out is halted; this needs it running",
    );
    expect(screen.getByRole("button", { name: "Resume" })).toBeDisabled();
    fireEvent.click(revert);
    expect(await screen.findByText("reverting everywhere")).toBeInTheDocument();
    expect(requests.some((r) => r.method === "POST" && new URL(r.url).pathname.endsWith("/revert"))).toBe(true);
  });

  it("lets a viewer watch but not act", async () => {
    const requests = stub("viewer", rollout({ state: "running", reason: null }));
    renderApp(`/rollouts/${RID}`);
    expect(await screen.findByTestId("rollout-state")).toHaveTextContent("running");
    for (const name of ["Pause", "Resume", "Revert everywhere"]) {
      expect(screen.getByRole("button", { name })).toBeDisabled();
    }
    expect(screen.getByRole("button", { name: "Pause" })).toHaveAttribute(
      "title",
      "viewers can watch a roll-out; operators act on it",
    );
    fireEvent.click(screen.getByRole("button", { name: "Pause" }));
    expect(requests.some((r) => r.method === "POST")).toBe(false);
  });

  it("says a made-up or unknown roll-out id is not one", async () => {
    stub("operator");
    renderApp("/rollouts/made-up");
    expect(await screen.findByRole("heading", { level: 1, name: "Roll-out not found" })).toBeInTheDocument();
    expect(screen.getByRole("alert")).toHaveTextContent("“made-up” is not a roll-out id");
  });
});

describe("roll-out from the plan page", () => {
  afterEach(() => vi.unstubAllGlobals());

  function plan(over: Partial<PlanDetail> = {}): PlanDetail {
    return {
      id: PID,
      host_id: "h0",
      target_id: "p100-1",
      root_name: "work",
      hot_set: false,
      members: ["work"],
      state: "approved",
      estimated: false,
      body_etag: null,
      build_id: "ab".repeat(20),
      code_sha256: "c".repeat(64),
      created_by: "maker",
      requested_by: "op",
      approved_by: "boss",
      comparison: null,
      interleaved: null,
      ...over,
    } as unknown as PlanDetail;
  }

  function planStub(p: PlanDetail, role: "operator" | "viewer" = "operator") {
    setSession({ token: "t", user: { id: "u", username: "op", role } });
    const routes = routeFetch({
      "/api/v1/auth/me": () => json({ id: "u", username: "op", role }),
      "/api/v1/hosts/h0": () => json(host({ id: "h0" })),
      [`/api/v1/hosts/h0/plans/${PID}`]: () => json(p),
      [`/api/v1/hosts/h0/plans/${PID}/audit`]: () => json([]),
      "GET /api/v1/rollouts": () => json([]),
      "POST /api/v1/rollouts": () => json(rollout({ state: "running", reason: null }), 201),
      [`/api/v1/rollouts/${RID}`]: () => json(rollout({ state: "running", reason: null })),
      [`/api/v1/rollouts/${RID}/audit`]: () => json([]),
    });
    vi.stubGlobal("fetch", routes.fetch);
    vi.stubGlobal("WebSocket", undefined);
    return routes.requests;
  }

  it("starts a roll-out of an approved plan with the label filter and wave sizes, then opens it", async () => {
    const requests = planStub(plan());
    renderApp(`/hosts/h0/plans/${PID}`);
    const form = await screen.findByRole("form", { name: "Start a roll-out" });
    const waves = within(form).getByRole("textbox", { name: /Wave sizes/ });
    fireEvent.change(waves, { target: { value: "2, 4" } });
    expect(within(form).getByText(/the first wave is the canary: one host/)).toBeInTheDocument();
    fireEvent.click(within(form).getByRole("button", { name: "Start roll-out" }));
    expect(await within(form).findByRole("alert")).toHaveTextContent("Waves: the first wave is the canary");
    expect(requests.some((r) => r.method === "POST")).toBe(false);

    fireEvent.change(waves, { target: { value: "1, 5" } });
    fireEvent.change(within(form).getByRole("searchbox", { name: /Only hosts with labels/ }), {
      target: { value: "role=db rack=r1" },
    });
    fireEvent.click(within(form).getByRole("button", { name: "Start roll-out" }));
    expect(await screen.findByTestId("rollout-state")).toHaveTextContent("running");
    const post = requests.find((r) => r.method === "POST" && new URL(r.url).pathname === "/api/v1/rollouts")!;
    const body = (await post.clone().json()) as Record<string, unknown>;
    expect(body).toMatchObject({
      host_id: "h0",
      plan_id: PID,
      labels: { role: "db", rack: "r1" },
      wave_sizes: [1, 5],
      window_s: 5,
      offline_wait_s: 60,
    });
  });

  it("offers no roll-out for a plan that is not approved, and tells a viewer who may start one", async () => {
    planStub(plan({ state: "ready" }));
    const first = renderApp(`/hosts/h0/plans/${PID}`);
    expect(await screen.findByTestId("plan-state")).toHaveTextContent("ready");
    expect(screen.queryByRole("heading", { name: "Roll out to the fleet" })).toBeNull();
    first.unmount();
    vi.unstubAllGlobals();
    planStub(plan(), "viewer");
    renderApp(`/hosts/h0/plans/${PID}`);
    expect(await screen.findByText(/An operator can roll this approved plan out/)).toBeInTheDocument();
    expect(screen.queryByRole("form", { name: "Start a roll-out" })).toBeNull();
  });

  it("links a per-host plan to the roll-out that made it", async () => {
    planStub(plan({ state: "installed", derived_from: "99999999-8888-4777-8666-555555555555", rollout_id: RID }));
    renderApp(`/hosts/h0/plans/${PID}`);
    const note = await screen.findByTestId("derived-plan");
    expect(note).toHaveTextContent("from the approved plan 99999999");
    expect(within(note).getByRole("link", { name: "Open the roll-out" })).toHaveAttribute("href", `/rollouts/${RID}`);
  });
});
