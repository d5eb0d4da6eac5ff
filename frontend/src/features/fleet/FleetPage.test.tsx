// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { renderApp } from "../../test/render";
import { host, json, routeFetch } from "../../test/fixtures";
import { setSession } from "../../api/session";
import type { FleetGroups, FleetHotCode, FleetPlans } from "../../api/types";

const GROUP = "0123456789abcdef0123456789abcdef";

function groups(): FleetGroups {
  return {
    total: 2,
    limit: 500,
    offset: 0,
    labels: {},
    items: [
      {
        id: GROUP,
        kernel_release: "6.18.0-test",
        kernel_build_id: "feedfacefeedface0001",
        host_count: 2,
        online_count: 1,
        offline_count: 1,
        hosts: [
          { id: "h-db1", hostname: "db1", online: true, labels: { role: "db", rack: "r1" } },
          { id: "h-db2", hostname: "db2", online: false, labels: { role: "db" } },
        ],
      },
      {
        id: "f".repeat(32),
        kernel_release: "6.1.0-56-amd64",
        kernel_build_id: "",
        host_count: 1,
        online_count: 1,
        offline_count: 0,
        hosts: [{ id: "h-web", hostname: "web1", online: true, labels: {} }],
      },
    ],
  };
}

function hotCode(): FleetHotCode {
  return {
    from: "2026-11-27T01:00:00Z",
    to: "2026-11-27T02:00:00Z",
    seconds: 3600,
    covered_from: "2026-11-27T01:00:00Z",
    covered_to: "2026-11-27T02:00:00Z",
    rollups: [{ grain: "1h", from: "2026-11-27T01:00:00Z", to: "2026-11-27T02:00:00Z" }],
    group: { id: GROUP, kernel_release: "6.18.0-test", kernel_build_id: "feedfacefeedface0001" },
    labels: {},
    min_share: 0.01,
    hosts: [
      { id: "h-db1", hostname: "db1", online: true, labels: { role: "db" }, busy_samples: 1000 },
      { id: "h-db2", hostname: "db2", online: false, labels: { role: "db" }, busy_samples: 500 },
    ],
    functions: 2,
    limit: 100,
    offset: 0,
    items: [
      {
        function_id: 42,
        name: "tcp_v4_rcv",
        module: "vmlinux",
        samples: 700,
        hot_hosts: 2,
        host_share: 1,
        outlier_hosts: ["h-db1"],
        median_share: 0.06,
        cells: [
          { host_id: "h-db1", samples: 600, share: 0.6, hot: true, outlier: true },
          { host_id: "h-db2", samples: 100, share: 0.2, hot: true, outlier: false },
        ],
      },
      {
        function_id: 43,
        name: "memcpy_orig",
        module: "vmlinux",
        samples: 5,
        hot_hosts: 0,
        host_share: 0,
        outlier_hosts: [],
        median_share: null,
        cells: [{ host_id: "h-db1", samples: 5, share: 0.005, hot: false, outlier: false }],
      },
    ],
    outlier_rule: {
      min_hosts: 5,
      min_samples: 50,
      min_ratio: 3,
      min_z: 3.5,
      min_share: 0.01,
      list_cap: 50,
      text: "a host whose share of the function is at least 3x the median share",
    },
    outliers: [
      {
        function_id: 42,
        name: "tcp_v4_rcv",
        module: "vmlinux",
        host_id: "h-db1",
        hostname: "db1",
        samples: 600,
        share: 0.6,
        median_share: 0.06,
        ratio: 10,
        z: 8.5,
      },
    ],
    outliers_total: 3,
  };
}

function fleetPlans(): FleetPlans {
  const window = (calls_per_s: number, wall_ns_per_call: number) => ({
    measurement_id: "m",
    state: "done",
    seconds: 1,
    calls: calls_per_s,
    calls_per_s,
    wall_ns_per_call,
    unavailable: {},
  });
  const base = {
    group_id: GROUP,
    kernel_release: "6.18.0-test",
    kernel_build_id: "feedfacefeedface0001",
    target_module: null,
    root_digest: "d".repeat(64),
    root_function_index: 2,
    estimated: false,
    code_sha256: "c".repeat(64),
    approved_at: "2026-11-27T00:59:00Z",
    reverted_at: null,
    reverted_by: null,
    derived_from: null,
  };
  return {
    total: 2,
    limit: 50,
    offset: 0,
    labels: {},
    group_id: null,
    kernel_build_id: null,
    reverted_within_h: 0,
    items: [
      {
        ...base,
        plan_id: "p-1",
        host_id: "h-db1",
        hostname: "db1",
        online: true,
        target_id: "kernel",
        target_kind: "kernel",
        root_name: "tcp_v4_rcv",
        state: "installed",
        installed_at: "2026-11-27T01:00:00Z",
        installed_by: "ops",
        approved_by: "boss",
        rollout_id: "r-1",
        rollout_state: "completed",
        comparison: {
          before: window(1000, 4000),
          after: window(1250, 3000),
          change: { calls_per_s: 0.25, wall_ns_per_call: -0.25 },
          emulated: null,
        },
        comparison_missing: null,
      },
      {
        ...base,
        plan_id: "p-2",
        host_id: "h-db2",
        hostname: "db2",
        online: false,
        target_id: "p4242-1000",
        target_kind: "process",
        root_name: "srv_fn_2",
        state: "installed",
        installed_at: "2026-11-27T00:30:00Z",
        installed_by: "ops",
        approved_by: "boss",
        rollout_id: null,
        rollout_state: null,
        comparison: null,
        comparison_missing: "the windows' measurements are no longer stored",
      },
    ],
  };
}

function stub() {
  setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
  const r = routeFetch({
    "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
    "/api/v1/hosts": () => json([host(), host({ id: "h2", hostname: "box2" })]),
    "/api/v1/fleet/groups": () => json(groups()),
    [`/api/v1/fleet/groups/${GROUP}/hot-code`]: () => json(hotCode()),
    "/api/v1/fleet/plans": () => json(fleetPlans()),
  });
  vi.stubGlobal("fetch", r.fetch);
  vi.stubGlobal("WebSocket", undefined);
  return r.requests;
}

describe("fleet page", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("is the first screen with more than one host: groups by kernel build with counts and labels", async () => {
    stub();
    renderApp("/");
    expect(await screen.findByRole("heading", { name: "Fleet" })).toBeInTheDocument();
    const group = (await screen.findByRole("heading", { name: /6\.18\.0-test/ })).closest("section")!;
    expect(group).toHaveTextContent("2 hosts · 1 online · 1 offline");
    const db1 = within(group)
      .getAllByRole("row")
      .find((r) => within(r).queryByRole("link", { name: "db1" }))!;
    expect(db1).toHaveTextContent("rack=r1");
    expect(db1).toHaveTextContent("role=db");
    expect(within(db1).getByRole("link", { name: "db1" })).toHaveAttribute("href", "/hosts/h-db1");
    const db2 = within(group)
      .getAllByRole("row")
      .find((r) => within(r).queryByRole("link", { name: "db2" }))!;
    expect(db2).toHaveTextContent("offline");
    const other = screen.getByRole("heading", { name: /6\.1\.0-56-amd64/ }).closest("section")!;
    expect(other).toHaveTextContent("no build id");
    expect(screen.getByText("3 hosts in 2 kernel builds")).toBeInTheDocument();
  });

  it("filters by label through the URL and refuses a filter that is not key=value", async () => {
    const requests = stub();
    renderApp("/");
    const box = await screen.findByRole("searchbox");
    fireEvent.change(box, { target: { value: "role" } });
    fireEvent.click(screen.getByRole("button", { name: "Filter" }));
    expect(await screen.findByRole("alert")).toHaveTextContent('"role" is not key=value');
    fireEvent.change(box, { target: { value: "role=db, rack=r1" } });
    fireEvent.click(screen.getByRole("button", { name: "Filter" }));
    await waitFor(() =>
      expect(
        requests.some((r) => {
          const u = new URL(r.url);
          return (
            u.pathname === "/api/v1/fleet/groups" && u.searchParams.getAll("label").join(",") === "role=db,rack=r1"
          );
        }),
      ).toBe(true),
    );
    const hot = (await screen.findAllByRole("link", { name: "Hot code" }))[0];
    expect(hot).toHaveAttribute("href", `/fleet/groups/${GROUP}?label=role%3Ddb%20rack%3Dr1`);
  });

  it("shows the host list at / with one host", async () => {
    setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
    vi.stubGlobal(
      "fetch",
      routeFetch({
        "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
        "/api/v1/hosts": () => json([host(), host({ id: "enrolled", hostname: "never", connected_at: null })]),
      }).fetch,
    );
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/");
    expect(await screen.findByRole("heading", { name: "Hosts" })).toBeInTheDocument();
  });
});

describe("fleet hot code", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("shows functions × hosts with the share of hosts, and a cell opens the host's function over the range", async () => {
    const requests = stub();
    renderApp(`/fleet/groups/${GROUP}`);
    const table = await screen.findByRole("table", { name: "Hot code across hosts" });
    const rows = within(table).getAllByRole("row");
    expect(rows[0]).toHaveTextContent(/Function.*Samples.*Hot on.*db1.*db2\s*offline/);
    expect(rows[1]).toHaveTextContent("tcp_v4_rcv");
    expect(rows[1]).toHaveTextContent("700");
    expect(rows[1]).toHaveTextContent("2 of 2 hosts (100%)");
    const cell = within(rows[1]).getByRole("link", { name: "tcp_v4_rcv on db2: 20.0%" });
    expect(cell).toHaveAttribute(
      "href",
      "/hosts/h-db2/functions/42?from=2026-11-27T01%3A00%3A00.000Z&to=2026-11-27T02%3A00%3A00.000Z",
    );
    expect(rows[2]).toHaveTextContent("0 of 2 hosts (0%)");
    expect(within(rows[2]).getAllByText("·")).toHaveLength(1); // db2 has no samples of it
    expect(screen.getByText(/read from the hour rollups/)).toBeInTheDocument();
    // The default range is the last hour, asked as a window.
    const first = requests.find((r) => new URL(r.url).pathname.endsWith("/hot-code"))!;
    expect(new URL(first.url).searchParams.get("window_s")).toBe("3600");

    fireEvent.click(within(table).getByRole("button", { name: /Hot on/ }));
    await waitFor(() =>
      expect(
        requests.some((r) => {
          const u = new URL(r.url);
          return u.pathname.endsWith("/hot-code") && u.searchParams.get("sort") === "hosts";
        }),
      ).toBe(true),
    );
    const sorted = await screen.findByRole("table", { name: "Hot code across hosts" });
    await waitFor(() =>
      expect(within(sorted).getByRole("columnheader", { name: /Hot on/ })).toHaveAttribute("aria-sort", "descending"),
    );
  });

  it("outlines outlier cells and lists the outlier hosts with the reason, each opening the host's function", async () => {
    stub();
    renderApp(`/fleet/groups/${GROUP}`);
    const panel = (await screen.findByRole("heading", { name: "Outlier hosts" })).closest("section")!;
    expect(panel).toHaveTextContent("Listed: a host whose share of the function is at least 3x the median share");
    const list = within(panel).getByRole("table", { name: "Outlier hosts" });
    const row = within(list).getAllByRole("row")[1];
    expect(row).toHaveTextContent("tcp_v4_rcv");
    expect(row).toHaveTextContent("60.0%");
    expect(row).toHaveTextContent("6.0%");
    expect(row).toHaveTextContent("60.0% of the host's samples vs 10.0× the median 6.0%; z 8.5; 600 samples");
    expect(within(row).getByRole("link", { name: "tcp_v4_rcv on db1" })).toHaveAttribute(
      "href",
      "/hosts/h-db1/functions/42?from=2026-11-27T01%3A00%3A00.000Z&to=2026-11-27T02%3A00%3A00.000Z",
    );
    expect(panel).toHaveTextContent("2 more outliers not listed");
    const table = screen.getByRole("table", { name: "Hot code across hosts" });
    const cell = within(table).getByRole("link", { name: "tcp_v4_rcv on db1: 60.0% (outlier)" }).closest("td")!;
    expect(cell).toHaveClass("heat-outlier");
    expect(cell).toHaveAttribute("title", "Outlier: 60.0% here vs the group's median 6.0%");
    expect(within(table).getByRole("link", { name: "tcp_v4_rcv on db2: 20.0%" }).closest("td")).not.toHaveClass(
      "heat-outlier",
    );
  });

  it("says when a group has too few hosts with samples to tell outliers", async () => {
    setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
    vi.stubGlobal(
      "fetch",
      routeFetch({
        "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
        "/api/v1/hosts": () => json([host(), host({ id: "h2", hostname: "box2" })]),
        [`/api/v1/fleet/groups/${GROUP}/hot-code`]: () => json({ ...hotCode(), outliers: [], outliers_total: 0 }),
      }).fetch,
    );
    vi.stubGlobal("WebSocket", undefined);
    renderApp(`/fleet/groups/${GROUP}`);
    const panel = (await screen.findByRole("heading", { name: "Outlier hosts" })).closest("section")!;
    expect(panel).toHaveTextContent("Too few hosts with samples in this range to tell outliers (2; the rule needs 5).");
  });
});

describe("installed plans across the fleet", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("is linked from the fleet page and the nav, and lists each host's plan with since and before/after", async () => {
    const requests = stub();
    renderApp("/");
    await screen.findByRole("heading", { name: /6\.18\.0-test/ });
    const fromFleet = (await screen.findAllByRole("link", { name: "Installed plans" })).map((a) =>
      a.getAttribute("href"),
    );
    expect(fromFleet).toContain("/fleet/plans");
    expect(fromFleet).toContain(`/fleet/plans?group=${GROUP}`);
    fireEvent.click(
      within(screen.getByRole("navigation", { name: "Main" })).getByRole("link", { name: "Installed plans" }),
    );
    const table = await screen.findByRole("table", { name: "Installed plans" });
    const [, first, second] = within(table).getAllByRole("row");
    expect(within(first).getByRole("link", { name: "db1" })).toHaveAttribute("href", "/hosts/h-db1");
    expect(within(first).getByRole("link", { name: "tcp_v4_rcv" })).toHaveAttribute("href", "/hosts/h-db1/plans/p-1");
    expect(within(first).getByRole("link", { name: "completed" })).toHaveAttribute("href", "/rollouts/r-1");
    expect(first).toHaveTextContent("kernel");
    expect(first).toHaveTextContent("ops / boss");
    expect(first).toHaveTextContent("1,000/s → 1,250/s (+25%)");
    expect(first).toHaveTextContent("4.00 µs → 3.00 µs (−25%)");
    expect(second).toHaveTextContent("p4242-1000");
    expect(second).toHaveTextContent("offline");
    expect(second).toHaveTextContent("the windows' measurements are no longer stored");
    expect(screen.getByText(/2 plans installed/)).toBeInTheDocument();

    fireEvent.click(screen.getByRole("checkbox", { name: /Also reverted in the last 24 h/ }));
    await waitFor(() =>
      expect(
        requests.some((r) => {
          const u = new URL(r.url);
          return u.pathname === "/api/v1/fleet/plans" && u.searchParams.get("reverted_within_h") === "24";
        }),
      ).toBe(true),
    );
  });

  it("asks for one group's plans from the group link", async () => {
    const requests = stub();
    renderApp(`/fleet/plans?group=${GROUP}`);
    await screen.findByRole("table", { name: "Installed plans" });
    const asked = requests.find((r) => new URL(r.url).pathname === "/api/v1/fleet/plans")!;
    expect(new URL(asked.url).searchParams.get("group_id")).toBe(GROUP);
    expect(screen.getByRole("button", { name: "all builds" })).toBeInTheDocument();
  });
});
