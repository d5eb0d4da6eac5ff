// SPDX-License-Identifier: Apache-2.0
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { renderApp } from "../test/render";
import { host, json, routeFetch } from "../test/fixtures";
import { setSession } from "../api/session";
import type { FleetFlameDiff, FleetFlameGraph } from "../api/types";
import { compareSides, splitLabels } from "../features/flame/FleetFlameViews";

const GROUP = "0123456789abcdef0123456789abcdef";
const SUMMARY = { id: GROUP, kernel_release: "6.18.0-test", kernel_build_id: "feedfacefeedface0001" };
const FRAMES: FleetFlameGraph["frames"] = [
  { name: "entry_SYSCALL_64", module: "vmlinux", kind: "kernel", function_id: 1 },
  { name: "vfs_read", module: "vmlinux", kind: "kernel", function_id: 2 },
  { name: "do_sys_open", module: "vmlinux", kind: "kernel", function_id: 3 },
];
const HOSTS = [
  { id: "h-db1", hostname: "db1", online: true, labels: { rack: "r1" }, samples: 420 },
  { id: "h-db2", hostname: "db2", online: true, labels: { rack: "r2" }, samples: 360 },
];

function flame(): FleetFlameGraph {
  return {
    from: "2026-11-27T01:00:00Z",
    to: "2026-11-27T02:00:00Z",
    seconds: 3600,
    covered_from: "2026-11-27T01:00:00Z",
    covered_to: "2026-11-27T02:00:00Z",
    rollup: "group",
    group: SUMMARY,
    labels: {},
    filter: { pid: null, comm: null, cpu: null, idle: "exclude" },
    hosts: HOSTS,
    samples: 780,
    undefined_samples: 0,
    folded_samples: 0,
    frames: FRAMES,
    // root(780) → entry(780) → vfs_read(600), do_sys_open(180)
    nodes: { frame: [-1, 0, 1, 2], parent: [-1, 0, 1, 1], total: [780, 780, 600, 180], self: [0, 0, 600, 180] },
  };
}

function diff(): FleetFlameDiff {
  const side = (hosts: typeof HOSTS, labels: Record<string, string>, without: Record<string, string>) => ({
    from: "2026-11-27T01:00:00Z",
    to: "2026-11-27T02:00:00Z",
    seconds: 3600,
    covered_from: "2026-11-27T01:00:00Z",
    covered_to: "2026-11-27T02:00:00Z",
    rollup: "hosts" as const,
    labels,
    without,
    hosts,
  });
  return {
    group: SUMMARY,
    a: side([HOSTS[0]], { rack: "r1" }, {}),
    b: side([HOSTS[1]], {}, { rack: "r1" }),
    filter: { pid: null, comm: null, cpu: null, idle: "exclude" },
    a_samples: 420,
    b_samples: 360,
    folded_samples: 0,
    frames: FRAMES,
    nodes: {
      frame: [-1, 0, 1, 2],
      parent: [-1, 0, 1, 1],
      a_total: [420, 420, 360, 60],
      b_total: [360, 360, 240, 120],
      a_self: [0, 0, 360, 60],
      b_self: [0, 0, 240, 120],
    },
  };
}

function stub() {
  setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
  const r = routeFetch({
    "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
    "/api/v1/hosts": () => json([host(), host({ id: "h2", hostname: "box2" })]),
    [`/api/v1/fleet/groups/${GROUP}/hot-code`]: () => json({ detail: "not in this test" }, 503),
    [`/api/v1/fleet/groups/${GROUP}/flamegraph`]: () => json(flame()),
    [`/api/v1/fleet/groups/${GROUP}/flamegraph/diff`]: () => json(diff()),
  });
  vi.stubGlobal("fetch", r.fetch);
  vi.stubGlobal("WebSocket", undefined);
  return r.requests;
}

const frameNames = () => screen.getAllByTestId("flame-frame").map((b) => b.dataset.name);

describe("fleet group flame graph and compare", () => {
  beforeEach(() => {
    // jsdom lays nothing out and has no canvas: a 1000 px wide graph, drawn nowhere.
    vi.spyOn(HTMLElement.prototype, "clientWidth", "get").mockReturnValue(1000);
    vi.spyOn(HTMLCanvasElement.prototype, "getContext").mockReturnValue(null);
  });
  afterEach(() => {
    vi.unstubAllGlobals();
    vi.restoreAllMocks();
  });

  it("shows the group's merged tree narrowed by the page's label filter", async () => {
    const requests = stub();
    renderApp(`/fleet/groups/${GROUP}?view=flame&label=role%3Ddb`);
    expect(await screen.findByRole("heading", { name: "Fleet flame graph" })).toBeInTheDocument();
    expect(screen.getByRole("tab", { name: "Flame graph" })).toHaveAttribute("aria-selected", "true");
    expect(await screen.findByTestId("fleet-flame-summary")).toHaveTextContent(
      "780 samples with a stack from 2 of 2 hosts",
    );
    expect(screen.getByTestId("fleet-flame-summary")).toHaveTextContent("read from the build's stack rollup");
    await waitFor(() => expect(frameNames()).toEqual(expect.arrayContaining(["entry_SYSCALL_64", "vfs_read"])));
    const asked = new URL(requests.find((r) => new URL(r.url).pathname.endsWith("/flamegraph"))!.url);
    expect(asked.searchParams.getAll("label")).toEqual(["role=db"]);
    expect(asked.searchParams.get("window_s")).toBe("3600");
    expect(asked.searchParams.get("idle")).toBe("exclude");

    fireEvent.change(screen.getByRole("combobox", { name: "Idle task" }), { target: { value: "include" } });
    await waitFor(() =>
      expect(
        requests.some((r) => {
          const u = new URL(r.url);
          return u.pathname.endsWith("/flamegraph") && u.searchParams.get("idle") === "include";
        }),
      ).toBe(true),
    );
  });

  it("compares one rack against the others as a differential flame graph", async () => {
    const requests = stub();
    renderApp(`/fleet/groups/${GROUP}?view=compare`);
    expect(await screen.findByRole("heading", { name: "Fleet compare" })).toBeInTheDocument();
    const form = screen.getByRole("form", { name: "Compare" });
    const go = within(form).getByRole("button", { name: "Compare" });
    expect(go).toBeDisabled(); // no side A yet
    fireEvent.change(within(form).getByRole("textbox", { name: "Side A labels" }), { target: { value: "rack=r1" } });
    fireEvent.click(go);
    const summary = await screen.findByTestId("fleet-diff-summary");
    expect(summary).toHaveTextContent("Baseline (A): 420 samples from 1 of 1 host (rack=r1)");
    expect(summary).toHaveTextContent("comparison (B): 360 samples from 1 of 1 host (not rack=r1)");
    expect(summary).toHaveTextContent("read from each host's own stack rollups");
    await waitFor(() => expect(frameNames()).toEqual(expect.arrayContaining(["vfs_read", "do_sys_open"])));
    const asked = new URL(requests.find((r) => new URL(r.url).pathname.endsWith("/flamegraph/diff"))!.url);
    expect(asked.searchParams.getAll("a_label")).toEqual(["rack=r1"]);
    expect(asked.searchParams.getAll("b_without")).toEqual(["rack=r1"]);
    expect(asked.searchParams.get("a_from")).toBeNull();

    // Two ranges instead: both sides the whole group, each over its own range.
    fireEvent.click(within(form).getByRole("radio", { name: /two ranges/ }));
    fireEvent.click(within(form).getByRole("button", { name: "Compare" }));
    await waitFor(() =>
      expect(
        requests.some((r) => {
          const u = new URL(r.url);
          return u.pathname.endsWith("/flamegraph/diff") && u.searchParams.get("a_from") && u.searchParams.get("b_to");
        }),
      ).toBe(true),
    );
  });

  it("asks for the comparison the URL keeps, and shows it in the form", async () => {
    const requests = stub();
    renderApp(`/fleet/groups/${GROUP}?view=compare&cmp=labels&a=rack%3Dr1&bmode=labels&b=rack%3Dr2`);
    expect(await screen.findByTestId("fleet-diff-summary")).toHaveTextContent("Baseline (A): 420 samples");
    const asked = new URL(requests.find((r) => new URL(r.url).pathname.endsWith("/flamegraph/diff"))!.url);
    expect(asked.searchParams.getAll("a_label")).toEqual(["rack=r1"]);
    expect(asked.searchParams.getAll("b_label")).toEqual(["rack=r2"]);
    expect(asked.searchParams.getAll("b_without")).toEqual([]);
    const form = screen.getByRole("form", { name: "Compare" });
    expect(within(form).getByRole("textbox", { name: "Side A labels" })).toHaveValue("rack=r1");
    expect(within(form).getByRole("textbox", { name: "Side B labels" })).toHaveValue("rack=r2");
  });

  it("makes the sides of a comparison from its form", () => {
    expect(splitLabels(" rack=r1, role=db ")).toEqual(["rack=r1", "role=db"]);
    const r = { kind: "relative", seconds: 3600 } as const;
    expect(compareSides("labels", "", true, "", r, r)).toBeNull();
    expect(compareSides("labels", "rack=r1", false, "", r, r)).toBeNull();
    expect(compareSides("labels", "rack=r1", false, "rack=r2", r, r)).toEqual({
      a: { labels: ["rack=r1"], without: [], range: null },
      b: { labels: ["rack=r2"], without: [], range: null },
    });
    expect(compareSides("ranges", "", true, "", r, r)?.b.range).toBe(r);
  });
});
