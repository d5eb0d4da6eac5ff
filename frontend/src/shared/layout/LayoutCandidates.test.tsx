// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { renderApp } from "../../test/render";
import { host, json, routeFetch } from "../../test/fixtures";
import { setSession } from "../../api/session";
import type { LayoutCandidate } from "../../api/types";
import { layoutRows, sortLayoutRows } from "./layoutModel";

const PLAN_ID = "0b6f4c1e-8a3d-4f7a-9c2e-5d1b7e9a4f20";

function candidate(over: Partial<LayoutCandidate> & { function_id: number; name: string }): LayoutCandidate {
  return {
    module: "vmlinux",
    digest: "0".repeat(64),
    function_index: over.function_id,
    address: 18446744071579000000,
    address_hex: "ffffffff81001000",
    size: 256,
    samples: 10,
    share: 0.1,
    counted_share: null,
    measurement_id: null,
    hot_basis: "samples",
    hot_blocks: 2,
    blocks: 4,
    hot_bytes: 128,
    hot_jumps: 2,
    branch_density: 1,
    hot_lines: 2,
    minimum_lines: 2,
    l1i_lines: 512,
    l1i_share: 2 / 512,
    taken_share: null,
    jump_executions: null,
    movable: true,
    kept: null,
    unavailable: ["taken share unavailable: no exact block-count measurement of it"],
    score: 0.2,
    reason: "10.0% of samples; 2 hot lines (0.39% of the L1i, 2 if packed); 1.0 jumps per 64 B",
    ...over,
  };
}

// As the backend ranks them: by score, the function that cannot move last.
const ITEMS = [
  candidate({ function_id: 1, name: "alpha", share: 0.34, score: 0.69, hot_lines: 2, taken_share: null }),
  candidate({ function_id: 2, name: "beta", share: 0.11, score: 0.07, hot_lines: 3, taken_share: 0.62 }),
  candidate({
    function_id: 3,
    name: "gamma",
    share: 0.2,
    score: 0.4,
    hot_lines: 1,
    movable: false,
    kept: { plan_id: null, rule: "switch table", detail: "1 table(s)" },
    reason: "cannot move: switch table",
  }),
];

function stub(role: "viewer" | "operator") {
  setSession({ token: "t", user: { id: "u", username: role, role } });
  const routes = routeFetch({
    "/api/v1/auth/me": () => json({ id: "u", username: role, role }),
    "/api/v1/hosts/host-1": () => json(host()),
    "/api/v1/hosts/host-1/targets/kernel/layout-candidates": () =>
      json({
        from: "2026-11-26T10:00:00Z",
        to: "2026-11-26T10:01:00Z",
        seconds: 60,
        target_id: "kernel",
        weight: "samples",
        l1i: { size_bytes: 32768, line_bytes: 64, ways: 8 },
        total_samples: 175,
        items: ITEMS,
      }),
    "/api/v1/hosts/host-1/targets": () =>
      json([
        { id: "kernel", kind: "kernel", state: "attached", detail: "", pid: null, command: null },
        { id: "p77-1", kind: "process", state: "attached", detail: "", pid: 77, command: "server" },
      ]),
    "/api/v1/hosts/host-1/measurements": () => json([]),
    "/api/v1/hosts/host-1/targets/p77-1/layout-candidates": () =>
      json({
        from: "2026-11-26T10:00:00Z",
        to: "2026-11-26T10:01:00Z",
        seconds: 60,
        target_id: "p77-1",
        weight: "exact_counts",
        l1i: null,
        total_samples: null,
        items: [
          candidate({
            function_id: 21,
            name: "srv_loop",
            samples: null,
            share: null,
            counted_share: 0.75,
            hot_lines: null,
            l1i_share: null,
            taken_share: 0.6,
            hot_basis: "exact_counts",
            unavailable: ["L1i figures unavailable: the host reported no L1i geometry"],
          }),
        ],
      }),
    "POST /api/v1/hosts/host-1/plans": () => json({ id: PLAN_ID, state: "planning", hot_set: false }, 202),
    [`/api/v1/hosts/host-1/plans/${PLAN_ID}`]: () => json({ detail: "Plan not found" }, 404),
  });
  vi.stubGlobal("fetch", routes.fetch);
  vi.stubGlobal("WebSocket", undefined);
  return routes.requests;
}

const names = (table: HTMLElement) =>
  within(table)
    .getAllByRole("row")
    .slice(1)
    .map((r) => within(r).getByRole("link").textContent);

describe("layout candidates", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("shows the backend's ranking with its figures and reasons, sortable by a figure", async () => {
    stub("viewer");
    renderApp("/hosts/host-1?tab=layout");
    const table = await screen.findByRole("table", { name: "Layout candidates" });
    await within(table).findByRole("link", { name: "alpha" });
    expect(names(table)).toEqual(["alpha", "beta", "gamma"]);
    const alpha = within(table).getAllByRole("row")[1];
    expect(alpha).toHaveTextContent("0.690");
    expect(alpha).toHaveTextContent("34.00 %");
    expect(alpha).toHaveTextContent("2 (0.39 %)");
    expect(alpha).toHaveTextContent("10.0% of samples; 2 hot lines");
    const gamma = within(table).getAllByRole("row")[3];
    expect(gamma).toHaveTextContent("cannot move");
    expect(within(gamma).getByRole("button", { name: "Optimize gamma" })).toBeDisabled();
    // A viewer may not optimize.
    expect(within(alpha).getByRole("button", { name: "Optimize alpha" })).toBeDisabled();

    await userEvent.click(within(table).getByRole("button", { name: /^Hot lines/ }));
    expect(names(table)).toEqual(["beta", "alpha", "gamma"]);
    expect(within(table).getByRole("columnheader", { name: /Hot lines/ })).toHaveAttribute("aria-sort", "descending");
    await userEvent.click(within(table).getByRole("button", { name: /^Taken/ }));
    expect(names(table)).toEqual(["beta", "alpha", "gamma"]); // unmeasured (null) last
  });

  it("asks for a plan of a row's function and opens it (operators)", async () => {
    const requests = stub("operator");
    renderApp("/hosts/host-1?tab=layout");
    const table = await screen.findByRole("table", { name: "Layout candidates" });
    await userEvent.click(await within(table).findByRole("button", { name: "Optimize beta" }));
    await screen.findByRole("heading", { level: 1, name: "Plan not found" });
    const post = requests.find((r) => r.method === "POST" && r.url.endsWith("/plans"));
    expect(await post!.clone().json()).toMatchObject({ target: "kernel", function_id: 2, hot_set: false });
  });
});

describe("layout candidates of a process", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("are on its measure page, weighted by the measured instructions, with dashes for what the host lacks", async () => {
    const requests = stub("operator");
    renderApp("/hosts/host-1/measure?target=p77-1");
    const table = await screen.findByRole("table", { name: "Layout candidates" });
    const row = (await within(table).findByRole("link", { name: "srv_loop" })).closest("tr")!;
    expect(row).toHaveTextContent("75.00 %");
    expect(row).toHaveTextContent("60 %");
    expect(within(row).getAllByRole("cell")[4]).toHaveTextContent("–");
    expect(screen.getByText(/The host reported no L1i geometry/)).toBeInTheDocument();
    await userEvent.click(within(row).getByRole("button", { name: "Optimize srv_loop" }));
    await screen.findByRole("heading", { level: 1, name: "Plan not found" });
    const post = requests.find((r) => r.method === "POST" && r.url.endsWith("/plans"));
    expect(await post!.clone().json()).toMatchObject({ target: "p77-1", function_id: 21 });
  });
});

describe("layoutModel", () => {
  it("sorts by a figure with nulls last in both directions, ties in the backend's rank", () => {
    const rows = layoutRows(ITEMS);
    const by = (key: Parameters<typeof sortLayoutRows>[1], desc: boolean) =>
      sortLayoutRows(rows, key, desc).map((r) => r.item.name);
    expect(by("taken", true)).toEqual(["beta", "alpha", "gamma"]);
    expect(by("taken", false)).toEqual(["beta", "alpha", "gamma"]);
    expect(by("score", true)).toEqual(["alpha", "gamma", "beta"]);
    expect(by("rank", true)).toEqual(["gamma", "beta", "alpha"]);
    expect(by("name", false)).toEqual(["alpha", "beta", "gamma"]);
    expect(by("hot_bytes", true)).toEqual(["alpha", "beta", "gamma"]); // all equal: the backend's rank
    // The weight: a process's counted share where it has no sampled share.
    const p = layoutRows([candidate({ function_id: 9, name: "p", share: null, counted_share: 0.3 })]);
    expect(p[0].weight).toBe(0.3);
  });
});
