// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { renderApp } from "../../test/render";
import { host, json, routeFetch } from "../../test/fixtures";
import { setSession } from "../../api/session";

const PLAN_ID = "0b6f4c1e-8a3d-4f7a-9c2e-5d1b7e9a4f20";
const TARGETS = [
  { id: "kernel", kind: "kernel", state: "attached", detail: "", pid: null, command: null, active_measurements: 0 },
  {
    id: "p77-1",
    kind: "process",
    state: "attached",
    detail: "",
    pid: 77,
    command: "sqlite-driver",
    active_measurements: 0,
  },
];

function stub(role: "viewer" | "operator" | "approver" | "admin") {
  setSession({ token: "t", user: { id: "u", username: role, role } });
  const routes = routeFetch({
    "/api/v1/auth/me": () => json({ id: "u", username: role, role }),
    "/api/v1/hosts/host-1": () => json(host()),
    "/api/v1/hosts/host-1/measurements": () => json([]),
    "/api/v1/hosts/host-1/targets": () => json(TARGETS),
    "POST /api/v1/hosts/host-1/plans": () => json({ id: PLAN_ID, state: "planning", hot_set: true }, 202),
    [`/api/v1/hosts/host-1/plans/${PLAN_ID}`]: () => json({ detail: "Plan not found" }, 404),
  });
  vi.stubGlobal("fetch", routes.fetch);
  vi.stubGlobal("WebSocket", undefined);
  return routes.requests;
}

describe("optimize a process's hot set", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("asks for the process's hot set with the seconds given and opens the plan", async () => {
    const requests = stub("operator");
    renderApp("/hosts/host-1/measure?target=p77-1");
    const seconds = await screen.findByRole("spinbutton", { name: "Seconds of PC samples" });
    await userEvent.clear(seconds);
    await userEvent.type(seconds, "30");
    await userEvent.click(screen.getByRole("button", { name: "Optimize hot set" }));
    await screen.findByRole("heading", { level: 1, name: "Plan not found" });
    const post = requests.find((r) => r.method === "POST" && r.url.endsWith("/plans"));
    expect(post).toBeDefined();
    const body = await post!.clone().json();
    expect(body).toMatchObject({ target: "p77-1", hot_set: true, seconds: 30 });
    expect(body.function_id).toBeUndefined();
  });

  it("is not offered on the kernel's page, is disabled for viewers and outside the seconds' bounds", async () => {
    stub("viewer");
    const { unmount } = renderApp("/hosts/host-1/measure?target=p77-1");
    expect(await screen.findByRole("button", { name: "Optimize hot set" })).toBeDisabled();
    unmount();
    stub("operator");
    const again = renderApp("/hosts/host-1/measure?target=p77-1");
    const seconds = await screen.findByRole("spinbutton", { name: "Seconds of PC samples" });
    await userEvent.clear(seconds);
    await userEvent.type(seconds, "121");
    expect(screen.getByRole("button", { name: "Optimize hot set" })).toBeDisabled();
    again.unmount();
    renderApp("/hosts/host-1/measure?target=kernel");
    await screen.findByRole("heading", { level: 1, name: "Measure the kernel" });
    expect(screen.queryByRole("button", { name: "Optimize hot set" })).toBeNull();
  });
});
