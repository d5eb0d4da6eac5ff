// SPDX-License-Identifier: Apache-2.0
// The rows of a plan's before/after table (KernInst's Figure 4): each figure of the root in the window
// before the install and in the window after, its change, and its spread (its lowest and highest value
// over each window's one-second intervals). A figure the host cannot measure is "unavailable" with the
// agent's reason; the hardware counters, unavailable together on a host without a PMU, fold into one
// row that gives the reason once.
import type { PlanDetail, PlanWindow } from "../../api/types";

type Figure =
  | "calls_per_s"
  | "wall_ns_per_call"
  | "vtime_ns_per_call"
  | "cycles_per_call"
  | "instructions_per_call"
  | "icache_stall_per_call"
  | "branch_mispredict_per_call";

const FIGURES: {
  key: Figure;
  label: string;
  unit: string;
  digits: number;
  metric: string;
  hardware?: true;
  time?: true;
}[] = [
  { key: "calls_per_s", label: "Calls per second", unit: "/s", digits: 1, metric: "count" },
  { key: "wall_ns_per_call", label: "Wall time per call", unit: "ns", digits: 0, metric: "wall", time: true },
  { key: "vtime_ns_per_call", label: "Virtual time per call", unit: "ns", digits: 0, metric: "vtime", time: true },
  { key: "cycles_per_call", label: "Cycles per call", unit: "cycles", digits: 0, metric: "cycles", hardware: true },
  {
    key: "instructions_per_call",
    label: "Instructions per call",
    unit: "instructions",
    digits: 0,
    metric: "instructions",
    hardware: true,
  },
  {
    key: "icache_stall_per_call",
    label: "I-cache stall cycles per call",
    unit: "cycles",
    digits: 0,
    metric: "icache_stall",
    hardware: true,
  },
  {
    key: "branch_mispredict_per_call",
    label: "Branch-mispredict cycles per call",
    unit: "cycles",
    digits: 0,
    metric: "branch_mispredict",
    hardware: true,
  },
];

export interface Cell {
  text: string;
  unavailable?: string;
  /** Why the value is not a performance figure (the host's CPU is emulated), shown with it. */
  emulated?: string;
}

/** The label every time measured under software emulation carries. */
export const EMULATED = "under emulation, not a performance figure";
export interface BeforeAfterRow {
  key: string;
  label: string;
  before: Cell;
  after: Cell;
  change: string;
  spread: string;
}

const num = (v: number, digits: number) =>
  v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits, useGrouping: false });

function cell(w: PlanWindow | null | undefined, f: (typeof FIGURES)[number], emulated?: string | null): Cell {
  if (!w) return { text: "not measured" };
  const v = w[f.key];
  if (v !== null && v !== undefined) {
    const text = `${num(v, f.digits)} ${f.unit}`;
    return f.time && emulated ? { text: `${text} (${EMULATED})`, emulated } : { text };
  }
  const why = w.unavailable[f.metric];
  return { text: why ? `unavailable (${why})` : "unavailable", unavailable: why ?? "no value in this window" };
}

function spreadOf(w: PlanWindow | null | undefined, f: (typeof FIGURES)[number]): string {
  const s = w?.spread?.[f.key];
  if (!s) return "—";
  return `${num(s.min, f.digits)}–${num(s.max, f.digits)} ${f.unit} (${s.intervals} s)`;
}

/** The table's rows for a plan, or none before its first window. */
export function beforeAfterRows(plan: Pick<PlanDetail, "comparison">): BeforeAfterRow[] {
  const c = plan.comparison;
  if (!c) return [];
  const rows: BeforeAfterRow[] = [];
  const hardware = FIGURES.filter((f) => f.hardware);
  // The agent names the metric first ("cycles timer unavailable: no hardware PMU: ..."): the same
  // reason once that name is taken off.
  const reasons = new Set(
    hardware.flatMap((f) =>
      [c.before, c.after].map((w) =>
        (w?.unavailable[f.metric] ?? "").replace(new RegExp(`^${f.metric} timer unavailable: `), ""),
      ),
    ),
  );
  const folded = reasons.size === 1 && !reasons.has("");
  for (const f of FIGURES) {
    if (f.hardware && folded) continue;
    const change = c.change[f.key];
    rows.push({
      key: f.key,
      label: f.label,
      before: cell(c.before, f, c.emulated),
      after: cell(c.after, f, c.emulated),
      change: change === null || change === undefined ? "—" : `${(change * 100).toFixed(1)}%`,
      spread: `${spreadOf(c.before, f)} → ${spreadOf(c.after, f)}`,
    });
  }
  if (folded) {
    const why = [...reasons][0];
    const text = `unavailable (${why})`;
    rows.push({
      key: "hardware",
      label: "Hardware counters (cycles, instructions, I-cache stall, branch mispredict)",
      before: { text, unavailable: why },
      after: { text, unavailable: why },
      change: "—",
      spread: "—",
    });
  }
  return rows;
}

/** Measurement states after which a window's figures no longer change. */
const WINDOW_ENDED = new Set(["stopped", "target_exited", "failed"]);

/** Whether a window has ended (its measurement stopped): until then its figures are partial. */
export function windowEnded(w: PlanWindow | null | undefined): boolean {
  return !!w && WINDOW_ENDED.has(w.state);
}

/** The windows' lengths and call counts; a window still running says so (its seconds so far). */
export function windowText(w: PlanWindow | null | undefined): string {
  if (!w) return "—";
  const text = `${w.seconds.toFixed(1)} s, ${w.calls ?? 0} calls`;
  return windowEnded(w) ? text : `measuring… ${text} so far`;
}

/** How often the plan page asks for its plan (ms): every second while the agent works on it or a window
 *  or a comparison runs (an installed plan's window after fills for its whole length, not only until its first calls),
 *  else every 10 s (state changes are also pushed). */
export function planRefreshMs(
  p: Pick<PlanDetail, "state" | "comparison" | "after_measurement" | "interleaved"> | undefined,
): number {
  if (!p) return 2000;
  if (p.interleaved?.state === "running") return 1000;
  if (p.state === "planning" || p.state === "installing" || p.state === "reverting") return 1000;
  if (p.state === "installed" && (!p.after_measurement || !windowEnded(p.comparison?.after))) return 1000;
  return 10_000;
}
