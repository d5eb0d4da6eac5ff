// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import type { MeasuredResource, MeasurementSeries, MeasurementValues } from "../../api/types";
import {
  chartSeries,
  formatDuration,
  metricAvailability,
  NO_REASON,
  resourceNames,
  splitColumns,
  tableRows,
} from "./measureModel";

const plan = (metric: string, label: "exact" | "sampled" | "estimate" = "exact", available = true, reason = "") => ({
  metric,
  available,
  label,
  mechanism: "uprobe",
  reason,
  unit: metric.endsWith("_ns") ? "ns" : "calls",
});

function resource(
  index: number,
  kind: "function" | "block",
  metrics: ReturnType<typeof plan>[],
  offset: number | null = null,
): MeasuredResource {
  return {
    index,
    digest: "a".repeat(64),
    function_index: 3,
    function_id: 9,
    kind,
    block_offset: offset,
    function: "f",
    address: 4096 + (offset ?? 0),
    address_hex: (4096 + (offset ?? 0)).toString(16),
    size: 64,
    function_row: kind === "block" ? 0 : null,
    metrics,
  };
}

const slots = (v: Partial<Record<string, number>>) => ({
  count: null,
  wall_ns: null,
  vtime_ns: null,
  cycles: null,
  instructions: null,
  icache_stall: null,
  branch_mispredict: null,
  exits: null,
  samples: null,
  ...v,
});

describe("the live table", () => {
  it("shows counts with units and rates, per-call times, concurrency and each value's label", () => {
    const rows = tableRows(
      [
        resource(0, "function", [plan("count"), plan("wall_ns"), plan("vtime_ns"), plan("concurrency")]),
        resource(1, "block", [plan("count", "sampled")], 0x10),
      ],
      ["count", "wall", "vtime", "concurrency"],
      {
        measured_seconds: 10,
        intervals: 10,
        resources: [
          { resource: 0, values: slots({ count: 1000, exits: 1000, wall_ns: 2e9, vtime_ns: 1e9 }) },
          { resource: 1, values: slots({ count: 37 }) },
        ],
      } as unknown as MeasurementValues,
    );
    expect(rows[0].cells.count).toMatchObject({ text: "1,000 calls", detail: "100 /s", label: "exact" });
    expect(rows[0].cells.wall).toMatchObject({ text: "2 s", detail: "2 ms/call" });
    expect(rows[0].cells.vtime).toMatchObject({ text: "1 s", detail: "1 ms/call" });
    expect(rows[0].cells.concurrency).toMatchObject({ text: "0.2 threads" });
    expect(rows[1].name).toBe("f+0x10");
    expect(rows[1].cells.count).toMatchObject({ text: "37 samples", label: "sampled" });
    expect(rows[1].cells.wall).toMatchObject({ text: "—", unavailable: "not requested" });
  });

  it("says why a metric is unavailable instead of showing a number", () => {
    const rows = tableRows(
      [resource(0, "function", [plan("cycles", "exact", false, "no hardware PMU on this host")])],
      ["cycles"],
      undefined,
    );
    expect(rows[0].cells.cycles).toMatchObject({ text: "unavailable", unavailable: "no hardware PMU on this host" });
  });

  it("formats durations in the unit that fits", () => {
    expect(formatDuration(12)).toBe("12 ns");
    expect(formatDuration(1500)).toBe("1.5 µs");
    expect(formatDuration(2.5e6)).toBe("2.5 ms");
  });
});

describe("the chart's series", () => {
  it("divides each bucket by its measured seconds and leaves unmeasured buckets out", () => {
    const series = {
      from: "2026-01-01T00:00:00Z",
      to: "2026-01-01T00:00:30Z",
      seconds: 30,
      step_s: 10,
      buckets: [
        { t: "2026-01-01T00:00:00Z", seconds: 10 },
        { t: "2026-01-01T00:00:10Z", seconds: 5 },
      ],
      series: [
        {
          resource: 0,
          points: [
            { t: "2026-01-01T00:00:00Z", values: slots({ count: 100, wall_ns: 5e9 }) },
            { t: "2026-01-01T00:00:10Z", values: slots({ count: 100 }) },
            { t: "2026-01-01T00:00:20Z", values: slots({ count: 7 }) },
          ],
        },
      ],
    } as unknown as MeasurementSeries;
    const names = resourceNames([resource(0, "function", [])]);
    expect(chartSeries(series, names, "count")[0].points.map((p) => p.v)).toEqual([10, 20]);
    expect(chartSeries(series, names, "wall")[0].points[0].v).toBe(0.5);
    expect(chartSeries(series, names, "count")[0].name).toBe("f");
  });
});

describe("what a host can measure", () => {
  const cap = (name: string, available: boolean, detail = "") => ({ name, available, detail });
  // This VM: no kprobes, no fentry/fexit, no PMU; sampling, tracepoints and uprobes work.
  const vm = [
    cap("fentry", false, "BPF_PROG_LOAD: EPERM"),
    cap("fexit", false, "BPF_PROG_LOAD: EPERM"),
    cap("kprobes", false, "no kprobe PMU"),
    cap("kretprobes", false, "no kprobe PMU"),
    cap("perf_sampling", true),
    cap("hardware_pmu", false, "PMU not available due to virtualization"),
    cap("uprobes", true),
    cap("uretprobes", true),
  ];

  it("rules out kernel timers on a host without fentry or kprobes, with the probes' reasons", () => {
    const a = metricAvailability("kernel", vm);
    expect(a.count).toBeNull();
    for (const m of ["wall", "vtime", "concurrency"] as const) {
      expect(a[m]).toMatch(/needs fentry and fexit, or kprobes and kretprobes/);
      expect(a[m]).toContain("kprobes: no kprobe PMU");
    }
    expect(a.cycles).toBe("PMU not available due to virtualization");
  });

  it("lets a process on the same host be timed with uprobes", () => {
    const a = metricAvailability("process", vm);
    expect([a.count, a.wall, a.vtime, a.concurrency]).toEqual([null, null, null, null]);
  });

  it("holds nothing against a capability the agent did not report", () => {
    const a = metricAvailability("kernel", [cap("hardware_pmu", true)]);
    expect(Object.values(a).every((v) => v === null)).toBe(true);
  });

  it("states a metric no row can show once, with its reason, instead of a column of unavailable cells", () => {
    const refused = plan("wall_ns", "exact", false, "timing kernel functions needs fentry or kprobes");
    const res = [
      resource(0, "function", [plan("count", "sampled"), refused]),
      resource(1, "block", [plan("count", "sampled"), { ...refused, reason: "" }], 0x10),
    ];
    const cols = splitColumns(res, ["count", "wall"]);
    expect(cols.shown).toEqual(["count"]);
    expect(cols.unavailable).toEqual([
      { metric: "wall", reason: `timing kernel functions needs fentry or kprobes; ${NO_REASON}` },
    ]);
    expect(tableRows([res[1]], ["wall"], undefined)[0].cells.wall?.unavailable).toBe(NO_REASON);
  });
});
