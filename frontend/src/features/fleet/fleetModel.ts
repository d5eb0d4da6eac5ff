// SPDX-License-Identifier: Apache-2.0
// Pure shaping for the fleet views: label filters and label text as the SRE types them, the hosts ×
// functions heat table of a group's hot code, and the links from a cell to that host's function view.
import type { FleetHotCode, FleetPlan, HotCodeCell, HotCodeOutlier, HotFunction, OutlierRule } from "../../api/types";
import { LABEL_KEY_RE } from "../../lib/labels";
import { rangeSearch } from "../../lib/urlState";

export { LABEL_KEY_RE, parseLabelFilter } from "../../lib/labels";
export const MAX_LABELS = 32;
export const MAX_LABEL_VALUE = 255;
// eslint-disable-next-line no-control-regex -- what the backend refuses, checked before it is sent
const CONTROL_RE = /[\u0000-\u001f\u007f]/;

/** Labels edited as text, one key=value a line → the labels, or the first mistake. */
export function parseLabelLines(text: string): { labels: Record<string, string>; error: string | null } {
  const labels: Record<string, string> = {};
  const lines = text.split("\n").filter((l) => l.trim() !== "");
  if (lines.length > MAX_LABELS) return { labels: {}, error: `at most ${MAX_LABELS} labels` };
  for (const line of lines) {
    const eq = line.indexOf("=");
    const key = eq < 0 ? line.trim() : line.slice(0, eq).trim();
    const value = eq < 0 ? "" : line.slice(eq + 1).trim();
    if (eq < 0) return { labels: {}, error: `"${key}" is not key=value` };
    if (!LABEL_KEY_RE.test(key)) return { labels: {}, error: `"${key}" is not a label key (letters, digits, . _ - /)` };
    if (key in labels) return { labels: {}, error: `${key} is given twice` };
    if (value.length > MAX_LABEL_VALUE) return { labels: {}, error: `${key}: at most ${MAX_LABEL_VALUE} characters` };
    if (CONTROL_RE.test(value)) return { labels: {}, error: `${key}: control characters are not allowed` };
    labels[key] = value;
  }
  return { labels, error: null };
}

/** Labels as sorted "key=value" texts. */
export function labelTexts(labels: Record<string, string> | undefined): string[] {
  return Object.entries(labels ?? {})
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`);
}

export interface HeatRow {
  fn: HotFunction;
  /** One per column host, in column order; null where the host has no samples of the function. */
  cells: (HotCodeCell | null)[];
}

/** The heat table: one column per host of the answer (busiest first), one row per function. */
export function heatTable(data: FleetHotCode): { hosts: FleetHotCode["hosts"]; rows: HeatRow[] } {
  const hosts = [...data.hosts].sort((a, b) => b.busy_samples - a.busy_samples || (a.hostname < b.hostname ? -1 : 1));
  const rows = data.items.map((fn) => {
    const byHost = new Map(fn.cells.map((c) => [c.host_id, c]));
    return { fn, cells: hosts.map((h) => byHost.get(h.id) ?? null) };
  });
  return { hosts, rows };
}

/** A cell's colour step, 0 (no samples) to 5 (the function has half or more of the host's samples). */
export function heatLevel(cell: HotCodeCell | null): number {
  if (!cell || cell.samples === 0) return 0;
  const steps = [0.01, 0.05, 0.15, 0.3, 0.5];
  let level = 1;
  for (let i = 1; i < steps.length; i++) if (cell.share >= steps[i]) level = i + 1;
  return level;
}

/** The host's function view over exactly the range the table covers. */
export function cellLink(hostId: string, functionId: number, data: Pick<FleetHotCode, "from" | "to">): string {
  const range = { kind: "absolute" as const, from: new Date(data.from), to: new Date(data.to) };
  return `/hosts/${encodeURIComponent(hostId)}/functions/${functionId}?${rangeSearch(range)}`;
}

/** "3 of 4 hosts (75%)". */
export function hostShareText(fn: Pick<HotFunction, "hot_hosts" | "host_share">, hostCount: number): string {
  return `${fn.hot_hosts} of ${hostCount} host${hostCount === 1 ? "" : "s"} (${Math.round(fn.host_share * 100)}%)`;
}

/** A share as a percentage with one decimal ("12.5%"); finer below 0.1% so a small median is not "0.0%". */
export function pct(share: number): string {
  if (share > 0 && share < 0.001) return `${(share * 100).toPrecision(2)}%`;
  return `${(share * 100).toFixed(1)}%`;
}

/** Why a host is an outlier for a function, in the rule's terms. */
export function outlierReason(
  o: HotCodeOutlier,
  rule: Pick<OutlierRule, "min_ratio" | "min_z" | "min_samples">,
): string {
  const against =
    o.median_share > 0 ? `${(o.ratio ?? 0).toFixed(1)}× the median ${pct(o.median_share)}` : "the median host has none";
  const z = o.z === null ? "the other hosts agree (MAD 0)" : `z ${o.z.toFixed(1)}`;
  return (
    `${pct(o.share)} of the host's samples vs ${against}; ${z}; ${o.samples.toLocaleString("en-US")} samples ` +
    `(rule: ≥ ${rule.min_ratio}× the median, z ≥ ${rule.min_z}, ≥ ${rule.min_samples} samples)`
  );
}

/** One figure of a plan's before/after: "4.00 µs → 3.00 µs (−25%)", or why there is none. */
export function beforeAfterText(
  plan: Pick<FleetPlan, "comparison" | "comparison_missing">,
  figure: "calls_per_s" | "wall_ns_per_call",
): string {
  const c = plan.comparison;
  if (!c) return plan.comparison_missing ?? "not measured";
  const fmt = (v: number | null | undefined) =>
    v === null || v === undefined
      ? "—"
      : figure === "calls_per_s"
        ? `${v.toLocaleString("en-US", { maximumFractionDigits: 1 })}/s`
        : v >= 1000
          ? `${(v / 1000).toFixed(2)} µs`
          : `${v.toFixed(0)} ns`;
  const before = c.before?.[figure],
    after = c.after?.[figure];
  if ((before === null || before === undefined) && (after === null || after === undefined))
    return "no calls measured in either window";
  const change = c.change[figure];
  const delta =
    change === null || change === undefined
      ? ""
      : ` (${change > 0 ? "+" : change < 0 ? "−" : "±"}${Math.abs(change * 100).toFixed(0)}%)`;
  return `${fmt(before)} → ${fmt(after)}${delta}`;
}
