// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import type { FleetHotCode, FleetPlan, OutlierRule } from "../../api/types";
import {
  cellLink,
  heatLevel,
  heatTable,
  beforeAfterText,
  hostShareText,
  labelTexts,
  outlierReason,
  pct,
  parseLabelFilter,
  parseLabelLines,
} from "./fleetModel";

function hotCode(): FleetHotCode {
  const cell = (host_id: string, samples: number, share: number) => ({
    host_id,
    samples,
    share,
    hot: share >= 0.2,
    outlier: false,
  });
  return {
    from: "2026-11-27T01:00:00Z",
    to: "2026-11-27T02:00:00Z",
    seconds: 3600,
    covered_from: "2026-11-27T01:00:00Z",
    covered_to: "2026-11-27T02:00:00Z",
    rollups: [{ grain: "1h", from: "2026-11-27T01:00:00Z", to: "2026-11-27T02:00:00Z" }],
    group: { id: "a".repeat(32), kernel_release: "6.18.0", kernel_build_id: "b1" },
    labels: {},
    min_share: 0.2,
    hosts: [
      { id: "h-a", hostname: "alpha", online: true, labels: {}, busy_samples: 100 },
      { id: "h-b", hostname: "beta", online: true, labels: {}, busy_samples: 900 },
      { id: "h-c", hostname: "gamma", online: false, labels: {}, busy_samples: 0 },
    ],
    functions: 2,
    limit: 100,
    offset: 0,
    items: [
      {
        function_id: 7,
        name: "tcp_rcv",
        module: "vmlinux",
        samples: 500,
        hot_hosts: 2,
        host_share: 2 / 3,
        outlier_hosts: [],
        median_share: null,
        cells: [cell("h-b", 450, 0.5), cell("h-a", 50, 0.5)],
      },
      {
        function_id: 9,
        name: "memcpy",
        module: "vmlinux",
        samples: 9,
        hot_hosts: 0,
        host_share: 0,
        outlier_hosts: [],
        median_share: null,
        cells: [cell("h-b", 9, 0.01)],
      },
    ],
    outlier_rule: RULE,
    outliers: [],
    outliers_total: 0,
  };
}

const RULE: OutlierRule = {
  min_hosts: 5,
  min_samples: 50,
  min_ratio: 3,
  min_z: 3.5,
  min_share: 0.01,
  list_cap: 50,
  text: "a host whose share …",
};

describe("fleet model", () => {
  it("parses a label filter typed with spaces or commas and names the first mistake", () => {
    expect(parseLabelFilter(" role=db,  rack=r1 ")).toEqual({ labels: ["role=db", "rack=r1"], error: null });
    expect(parseLabelFilter("")).toEqual({ labels: [], error: null });
    expect(parseLabelFilter("role")).toEqual({ labels: [], error: '"role" is not key=value' });
    expect(parseLabelFilter("=db").error).toBe('"=db" is not key=value');
    expect(parseLabelFilter("ro!e=db").error).toBe('"ro!e" is not a label key');
  });

  it("parses edited label lines by the backend's rules", () => {
    expect(parseLabelLines("role=db\n\nrack = r1\nempty=")).toEqual({
      labels: { role: "db", rack: "r1", empty: "" },
      error: null,
    });
    expect(parseLabelLines("role=db\nrole=web").error).toBe("role is given twice");
    expect(parseLabelLines("role").error).toBe('"role" is not key=value');
    expect(parseLabelLines("bad key=x").error).toMatch(/not a label key/);
    expect(parseLabelLines(`role=${"x".repeat(256)}`).error).toBe("role: at most 255 characters");
    expect(parseLabelLines("role=a\u0007b").error).toBe("role: control characters are not allowed");
    expect(parseLabelLines(Array.from({ length: 33 }, (_, i) => `k${i}=v`).join("\n")).error).toBe("at most 32 labels");
  });

  it("prints labels sorted by key", () => {
    expect(labelTexts({ role: "db", rack: "r1" })).toEqual(["rack=r1", "role=db"]);
    expect(labelTexts(undefined)).toEqual([]);
  });

  it("lays the heat table out busiest host first, with an empty cell where a host has no samples", () => {
    const t = heatTable(hotCode());
    expect(t.hosts.map((h) => h.hostname)).toEqual(["beta", "alpha", "gamma"]);
    expect(t.rows.map((r) => r.fn.name)).toEqual(["tcp_rcv", "memcpy"]);
    expect(t.rows[0].cells.map((c) => c?.samples ?? null)).toEqual([450, 50, null]);
    expect(t.rows[1].cells.map((c) => c?.samples ?? null)).toEqual([9, null, null]);
  });

  it("steps the heat by share, zero for no samples", () => {
    expect(heatLevel(null)).toBe(0);
    expect(heatLevel({ host_id: "h", samples: 0, share: 0, hot: false, outlier: false })).toBe(0);
    expect(heatLevel({ host_id: "h", samples: 1, share: 0.001, hot: false, outlier: false })).toBe(1);
    expect(heatLevel({ host_id: "h", samples: 1, share: 0.2, hot: true, outlier: false })).toBe(3);
    expect(heatLevel({ host_id: "h", samples: 1, share: 0.5, hot: true, outlier: false })).toBe(5);
  });

  it("links a cell to the host's function view over the table's exact range", () => {
    expect(cellLink("h/1", 7, hotCode())).toBe(
      "/hosts/h%2F1/functions/7?from=2026-11-27T01%3A00%3A00.000Z&to=2026-11-27T02%3A00%3A00.000Z",
    );
    expect(hostShareText({ hot_hosts: 2, host_share: 2 / 3 }, 3)).toBe("2 of 3 hosts (67%)");
    expect(hostShareText({ hot_hosts: 1, host_share: 1 }, 1)).toBe("1 of 1 host (100%)");
  });

  it("says why a host is an outlier in the rule's terms", () => {
    const o = {
      function_id: 7,
      name: "tcp_rcv",
      module: "vmlinux",
      host_id: "h-a",
      hostname: "alpha",
      samples: 1200,
      share: 0.25,
      median_share: 0.025,
      ratio: 10,
      z: null,
    };
    expect(outlierReason(o, RULE)).toBe(
      "25.0% of the host's samples vs 10.0× the median 2.5%; the other hosts agree (MAD 0); 1,200 samples " +
        "(rule: ≥ 3× the median, z ≥ 3.5, ≥ 50 samples)",
    );
    expect(outlierReason({ ...o, median_share: 0, ratio: null, z: 12.34 }, RULE)).toMatch(
      /^25\.0% of the host's samples vs the median host has none; z 12\.3;/,
    );
    expect(pct(0.0004)).toBe("0.040%");
    expect(pct(0)).toBe("0.0%");
  });

  it("writes a plan's before → after with its change, or why there is none", () => {
    const window = (calls_per_s: number | null, wall_ns_per_call: number | null) => ({
      measurement_id: "m",
      state: "done",
      seconds: 1,
      calls: calls_per_s,
      calls_per_s,
      wall_ns_per_call,
      unavailable: {},
    });
    const plan: Pick<FleetPlan, "comparison" | "comparison_missing"> = {
      comparison: {
        before: window(1000, 4000),
        after: window(1250, 3000),
        change: { calls_per_s: 0.25, wall_ns_per_call: -0.25 },
        emulated: null,
      },
      comparison_missing: null,
    };
    expect(beforeAfterText(plan, "calls_per_s")).toBe("1,000/s → 1,250/s (+25%)");
    expect(beforeAfterText(plan, "wall_ns_per_call")).toBe("4.00 µs → 3.00 µs (−25%)");
    const half = { ...plan, comparison: { ...plan.comparison!, after: null, change: { calls_per_s: null } } };
    expect(beforeAfterText(half, "wall_ns_per_call")).toBe("4.00 µs → —");
    const none = {
      ...plan,
      comparison: { ...plan.comparison!, before: window(null, null), after: window(null, null) },
    };
    expect(beforeAfterText(none, "calls_per_s")).toBe("no calls measured in either window");
    expect(
      beforeAfterText({ comparison: null, comparison_missing: "the install measured no window" }, "calls_per_s"),
    ).toBe("the install measured no window");
  });
});
