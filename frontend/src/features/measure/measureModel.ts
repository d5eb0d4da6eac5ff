// SPDX-License-Identifier: Apache-2.0
// What the measurement views show, from the API's sums: the live table (one row per measured resource,
// one cell per metric with its unit and its label: exact, sampled or estimate; unavailable metrics with
// the agent's reason) and the chart's series (per resource, a metric per second of each bucket).
// Values are sums over measured seconds, so rates, per-call values and concurrency are exact ratios
// of sums (kperfmon's per-invocation forms: wall or vtime over the calls that completed).
import type {
  Capability,
  MeasuredResource,
  MeasurementSeries,
  MeasurementValues,
  MetricPlan,
  SlotValues,
} from "../../api/types";

export type MetricId =
  "count" | "wall" | "vtime" | "concurrency" | "cycles" | "instructions" | "icache_stall" | "branch_mispredict";

export const METRICS: { id: MetricId; label: string; hardware: boolean }[] = [
  { id: "count", label: "Count", hardware: false },
  { id: "wall", label: "Wall time", hardware: false },
  { id: "vtime", label: "Virtual time (on CPU)", hardware: false },
  { id: "concurrency", label: "Concurrency", hardware: false },
  { id: "cycles", label: "Cycles", hardware: true },
  { id: "instructions", label: "Instructions", hardware: true },
  { id: "icache_stall", label: "I-cache stall cycles", hardware: true },
  { id: "branch_mispredict", label: "Branch-mispredict cycles", hardware: true },
];

/** The plan names of a requested metric (the agent reports wall_ns, vtime_ns). */
const PLAN_NAME: Record<MetricId, string> = {
  count: "count",
  wall: "wall_ns",
  vtime: "vtime_ns",
  concurrency: "concurrency",
  cycles: "cycles",
  instructions: "instructions",
  icache_stall: "icache_stall",
  branch_mispredict: "branch_mispredict",
};

/** Shown when the agent refused a metric without saying why (never the bare word again). */
export const NO_REASON = "the agent gave no reason";

/** Why each metric cannot be measured on a target of this kind on this host (null: it can), from the
 *  capabilities the host's agent reported: a capability reported unavailable rules out the metrics that
 *  need it; one not reported at all is not held against the host (the agent decides when asked).
 *  Kernel: a function's calls need fentry or kprobes (without them, only its blocks are counted, by
 *  sampling); its timers need an entry and an exit probe (fentry and fexit, or kprobes and kretprobes).
 *  Process: uprobes, and uretprobes for the timers. Hardware metrics need a PMU. */
export function metricAvailability(kind: "kernel" | "process", caps: Capability[]): Record<MetricId, string | null> {
  const cap = new Map(caps.map((c) => [c.name, c]));
  const has = (name: string) => cap.get(name)?.available !== false;
  const why = (names: string[]) => names.map((n) => `${n}: ${cap.get(n)?.detail || "unavailable"}`).join("; ");
  let timers: string | null;
  if (kind === "kernel") {
    timers =
      (has("fentry") && has("fexit")) || (has("kprobes") && has("kretprobes"))
        ? null
        : `timing kernel functions needs fentry and fexit, or kprobes and kretprobes (${why(
            ["fentry", "fexit", "kprobes", "kretprobes"].filter((n) => !has(n)),
          )})`;
  } else {
    timers =
      has("uprobes") && has("uretprobes")
        ? null
        : `timing process functions needs uprobes and uretprobes (${why(["uprobes", "uretprobes"].filter((n) => !has(n)))})`;
  }
  const count =
    kind === "kernel"
      ? has("fentry") || has("kprobes") || has("perf_sampling")
        ? null
        : `counting needs fentry, kprobes or sampling (${why(["fentry", "kprobes", "perf_sampling"])})`
      : has("uprobes")
        ? null
        : `counting process functions needs uprobes (${why(["uprobes"])})`;
  const hardware = has("hardware_pmu") ? null : cap.get("hardware_pmu")?.detail || "no PMU";
  const out = {} as Record<MetricId, string | null>;
  for (const m of METRICS) out[m.id] = m.hardware ? hardware : m.id === "count" ? count : timers;
  return out;
}

/** The table's columns: metrics some row can show, and those no row can, each with its reason once
 *  (instead of a column of identical "unavailable" cells). */
export function splitColumns(
  resources: MeasuredResource[],
  metrics: MetricId[],
): { shown: MetricId[]; unavailable: { metric: MetricId; reason: string }[] } {
  const shown: MetricId[] = [];
  const unavailable: { metric: MetricId; reason: string }[] = [];
  for (const m of metrics) {
    const plans = resources.map((r) => planOf(r, m));
    if (resources.length > 0 && plans.every((p) => p !== undefined && !p.available)) {
      const reasons = [...new Set(plans.map((p) => p!.reason || NO_REASON))];
      unavailable.push({ metric: m, reason: reasons.join("; ") });
    } else {
      shown.push(m);
    }
  }
  return { shown, unavailable };
}

export interface Cell {
  /** The main number with its unit, e.g. "1,000 calls", "12.5 ms". */
  text: string;
  /** A second form: the rate, or the per-call value. */
  detail: string | null;
  label: "exact" | "sampled" | "estimate" | null;
  unavailable: string | null;
}

export interface TableRow {
  index: number;
  name: string;
  kind: "function" | "block";
  address: string;
  cells: Partial<Record<MetricId, Cell>>;
}

const nf = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const nf3 = new Intl.NumberFormat("en-US", { maximumSignificantDigits: 3 });

export function formatDuration(ns: number): string {
  if (ns >= 1e9) return `${nf3.format(ns / 1e9)} s`;
  if (ns >= 1e6) return `${nf3.format(ns / 1e6)} ms`;
  if (ns >= 1e3) return `${nf3.format(ns / 1e3)} µs`;
  return `${nf3.format(ns)} ns`;
}

function planOf(r: MeasuredResource, m: MetricId): MetricPlan | undefined {
  return r.metrics.find((p) => p.metric === PLAN_NAME[m]);
}

function resourceName(r: MeasuredResource): string {
  return r.kind === "block" ? `${r.function}+0x${(r.block_offset ?? 0).toString(16)}` : r.function;
}

/** One cell: what the sums of one resource say about one metric. */
export function cellFor(r: MeasuredResource, m: MetricId, v: SlotValues | undefined, seconds: number): Cell {
  const plan = planOf(r, m);
  if (!plan) return { text: "—", detail: null, label: null, unavailable: "not requested" };
  if (!plan.available) return { text: "unavailable", detail: null, label: null, unavailable: plan.reason || NO_REASON };
  const label = plan.label;
  const count = v?.count ?? null;
  const exits = v?.exits ?? null;
  const perSecond = (x: number) => (seconds > 0 ? x / seconds : null);
  if (m === "count") {
    if (count === null) return { text: "0", detail: null, label, unavailable: null };
    const unit = label === "sampled" ? "samples" : r.kind === "block" ? "executions" : "calls";
    const rate = perSecond(count);
    return {
      text: `${nf.format(count)} ${unit}`,
      detail: rate === null ? null : `${nf3.format(rate)} /s`,
      label,
      unavailable: null,
    };
  }
  if (m === "wall" || m === "vtime") {
    const ns = (m === "wall" ? v?.wall_ns : v?.vtime_ns) ?? null;
    if (ns === null) return { text: "0 ns", detail: null, label, unavailable: null };
    const calls = exits ?? count;
    return {
      text: formatDuration(ns),
      detail: calls ? `${formatDuration(ns / calls)}/call` : null,
      label,
      unavailable: null,
    };
  }
  if (m === "concurrency") {
    const ns = v?.wall_ns ?? null;
    if (ns === null || seconds <= 0) return { text: "0 threads", detail: null, label, unavailable: null };
    return { text: `${nf3.format(ns / (seconds * 1e9))} threads`, detail: "average inside", label, unavailable: null };
  }
  const raw = v?.[m] ?? null;
  return { text: raw === null ? "0" : `${nf.format(raw)} events`, detail: null, label, unavailable: null };
}

/** The live table: resources × the measurement's metrics, over the values' range. */
export function tableRows(
  resources: MeasuredResource[],
  metrics: MetricId[],
  values: MeasurementValues | undefined,
): TableRow[] {
  const byIndex = new Map((values?.resources ?? []).map((rv) => [rv.resource, rv.values]));
  const seconds = values?.measured_seconds ?? 0;
  return resources.map((r) => ({
    index: r.index,
    name: resourceName(r),
    kind: r.kind,
    address: r.address_hex,
    cells: Object.fromEntries(metrics.map((m) => [m, cellFor(r, m, byIndex.get(r.index), seconds)])),
  }));
}

export interface ChartSeries {
  resource: number;
  name: string;
  points: { t: number; v: number }[];
}

/** Per resource, the metric per second of each bucket (count: calls/s; wall, vtime: thread-seconds
 *  per second, i.e. concurrency). Buckets without measured time are left out (a gap, not a zero). */
export function chartSeries(
  series: MeasurementSeries,
  names: Map<number, string>,
  metric: "count" | "wall" | "vtime",
): ChartSeries[] {
  const seconds = new Map(series.buckets.map((b) => [Date.parse(b.t), b.seconds]));
  return series.series.map((s) => ({
    resource: s.resource,
    name: names.get(s.resource) ?? `#${s.resource}`,
    points: s.points.flatMap((p) => {
      const t = Date.parse(p.t);
      const secs = seconds.get(t) ?? 0;
      if (secs <= 0) return [];
      const raw = metric === "count" ? p.values.count : metric === "wall" ? p.values.wall_ns : p.values.vtime_ns;
      const v = (raw ?? 0) / secs / (metric === "count" ? 1 : 1e9);
      return [{ t, v }];
    }),
  }));
}

export function resourceNames(resources: MeasuredResource[]): Map<number, string> {
  return new Map(resources.map((r) => [r.index, resourceName(r)]));
}
