// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import type { PlanDetail, PlanWindow } from "../../api/types";
import { beforeAfterRows, EMULATED, planRefreshMs, windowText } from "./beforeAfter";

const NO_PMU = "no hardware PMU: perf_event_open(cycles) failed with ENOENT";
const window = (over: Partial<PlanWindow>): PlanWindow => ({
  measurement_id: "m",
  state: "stopped",
  detail: "",
  seconds: 5,
  calls: 5000,
  calls_per_s: 1000,
  wall_ns_per_call: 747,
  vtime_ns_per_call: null,
  cycles_per_call: null,
  instructions_per_call: null,
  icache_stall_per_call: null,
  branch_mispredict_per_call: null,
  unavailable: Object.fromEntries(
    ["cycles", "instructions", "icache_stall", "branch_mispredict"].map((m) => [
      m,
      `${m} timer unavailable: ${NO_PMU}`,
    ]),
  ),
  spread: { wall_ns_per_call: { min: 700, max: 790, intervals: 5 } },
  ...over,
});
const plan = (comparison: PlanDetail["comparison"]) => ({ comparison });

describe("the before/after table", () => {
  it("gives each figure before and after with its change and spread, and folds a missing PMU into one row", () => {
    const rows = beforeAfterRows(
      plan({
        before: window({}),
        after: window({
          wall_ns_per_call: 700,
          calls_per_s: 1010.25,
          spread: { wall_ns_per_call: { min: 650, max: 760, intervals: 4 } },
        }),
        change: { calls_per_s: 0.01025, wall_ns_per_call: -0.0629, vtime_ns_per_call: null },
      }),
    );
    expect(rows.map((r) => r.key)).toEqual(["calls_per_s", "wall_ns_per_call", "vtime_ns_per_call", "hardware"]);
    const wall = rows[1];
    expect([wall.before.text, wall.after.text, wall.change]).toEqual(["747 ns", "700 ns", "-6.3%"]);
    expect(wall.spread).toBe("700–790 ns (5 s) → 650–760 ns (4 s)");
    expect(rows[0].after.text).toBe("1010.3 /s");
    // vtime was not served and the window says no reason: unavailable, no number made up.
    expect(rows[2].before).toEqual({ text: "unavailable", unavailable: "no value in this window" });
    expect(rows[2].change).toBe("—");
    expect(rows[3].before.text).toBe(`unavailable (${NO_PMU})`);
  });

  it("labels every time of an emulated host as no performance figure, and leaves the call rate alone", () => {
    const why = "under emulation, not a performance figure (the host's CPU is QEMU TCG CPU version 2.5+)";
    const rows = beforeAfterRows(
      plan({ before: window({ vtime_ns_per_call: 300 }), after: window({}), change: {}, emulated: why }),
    );
    expect(rows[1].before).toEqual({ text: `747 ns (${EMULATED})`, emulated: why });
    expect(rows[2].before.text).toBe(`300 ns (${EMULATED})`);
    expect(rows[2].after.text).toBe("unavailable");
    expect(rows[0].before).toEqual({ text: "1000.0 /s" });
  });

  it("keeps the hardware counters apart when their reasons differ", () => {
    const w = window({});
    const other = window({
      unavailable: { ...w.unavailable, cycles: "cycles timer unavailable: the counter is in use" },
    });
    const rows = beforeAfterRows(plan({ before: w, after: other, change: {} }));
    expect(rows.find((r) => r.key === "cycles_per_call")?.after.text).toBe(
      "unavailable (cycles timer unavailable: the counter is in use)",
    );
    expect(rows.some((r) => r.key === "hardware")).toBe(false);
  });

  it("shows each hardware counter on its own row where the host measures them", () => {
    const pmu = window({
      unavailable: {},
      cycles_per_call: 2100,
      instructions_per_call: 1800.4,
      icache_stall_per_call: 310,
      branch_mispredict_per_call: 42,
    });
    const rows = beforeAfterRows(plan({ before: pmu, after: null, change: {} }));
    expect(rows.map((r) => r.key)).toEqual([
      "calls_per_s",
      "wall_ns_per_call",
      "vtime_ns_per_call",
      "cycles_per_call",
      "instructions_per_call",
      "icache_stall_per_call",
      "branch_mispredict_per_call",
    ]);
    expect(rows[4].before.text).toBe("1800 instructions");
    expect(rows[3].after.text).toBe("not measured");
    expect(rows[5].spread).toBe("— → —");
  });

  it("has no rows before the first window, and says how long each window ran", () => {
    expect(beforeAfterRows(plan(null))).toEqual([]);
    expect(windowText(window({ seconds: 5.04, calls: 5123 }))).toBe("5.0 s, 5123 calls");
    expect(windowText(null)).toBe("—");
  });

  it("says a window still running is partial, and keeps the page refreshing until the window after ends", () => {
    expect(windowText(window({ state: "running", seconds: 2, calls: 1800 }))).toBe(
      "measuring… 2.0 s, 1800 calls so far",
    );
    const plan = (state: string, after: ReturnType<typeof window> | null) =>
      ({
        state,
        after_measurement: after ? "m2" : null,
        comparison: { before: window({}), after, change: {} },
      }) as never;
    // Two seconds into the window after, with calls already: still partial, still refreshed every second.
    expect(planRefreshMs(plan("installed", window({ state: "running", seconds: 2, calls: 1800 })))).toBe(1000);
    expect(planRefreshMs(plan("installed", null))).toBe(1000);
    expect(planRefreshMs(plan("installed", window({ state: "stopped", seconds: 5 })))).toBe(10_000);
    expect(planRefreshMs(plan("requested", null))).toBe(10_000);
    expect(planRefreshMs(plan("installing", null))).toBe(1000);
    // A comparison running on a plan whose windows have ended: refreshed every second until it ends.
    const ended = plan("installed", window({ state: "stopped", seconds: 5 })) as object;
    expect(planRefreshMs({ ...ended, interleaved: { state: "running" } } as never)).toBe(1000);
    expect(planRefreshMs({ ...ended, interleaved: { state: "done" } } as never)).toBe(10_000);
  });
});
