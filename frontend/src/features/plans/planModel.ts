// SPDX-License-Identifier: Apache-2.0
// Shapes an agent's plan (hotpathd plan --json, as the backend checked it) into what the plan page
// draws: the I-cache grids before and after (sets × ways, conflicting sets beyond their ways), the
// footprint figures, the chain table, each group function's blocks in layout order coloured hot/cold
// by chain, the kept-in-place exclusions, and the emitted code as a listing. Pure: it runs in a worker.
import type { PlanBody } from "../../api/types";

export interface HeatCell {
  set: number;
  way: number;
  line: string;
  conflict: boolean;
  blocks: string[];
}
export interface HeatGrid {
  sets: number;
  ways: number;
  columns: number;
  lineBytes: number;
  hotLines: number;
  minimum: number;
  distance: number;
  ratio: number;
  conflictSets: number;
  fullest: number;
  hotBytes: number;
  cells: HeatCell[];
}
export interface ChainRow {
  fn: string;
  chain: number;
  bytes: number;
  weight: number;
  blocks: string;
}
export interface StripBlock {
  offset: number;
  size: number;
  count: number;
  hot: boolean;
  chain: number;
  newAddress: string | null;
}
export interface MemberView {
  fn: string;
  address: string;
  newAddress: string | null;
  size: number;
  hotBytes: number;
  coldBytes: number;
  chains: number;
  newHotBytes: number;
  newColdBytes: number;
  jumpTableBytes: number;
  /** How its hot chunk was laid out ("pettis-hansen" or "ext-tsp"; older plans: Pettis-Hansen's). */
  blockLayout: string;
  /** Branches taken in the original layout and in the plan's, computed from the counts and the layout. */
  takenBefore: number;
  takenAfter: number;
  blocks: StripBlock[];
}
export interface ListingLine {
  address: string;
  bytes: string;
  text: string;
  from: string;
}
export interface PlanView {
  status: string;
  message: string;
  root: string;
  estimated: boolean;
  verified: boolean;
  codeBytes: number;
  before: HeatGrid | null;
  after: HeatGrid | null;
  chains: ChainRow[];
  members: MemberView[];
  kept: { fn: string; address: string; rule: string; detail: string }[];
  totals: Record<string, number>;
  notes: string[];
  listing: ListingLine[] | null;
  hexLines: string[];
  bottleneck: string;
  /** How the exact counts were taken (exactCountsLabel) and the profile's own words. */
  counts: string;
  countsSource: string;
}

// The plan's types are generated: proto/hotpath/v1/plan.schema.json → the backend's models → the OpenAPI
// document → src/api/schema.d.ts. Members the backend's check leaves optional default here as they did
// before (0, "", none).
export type AgentPlan = PlanBody;
export type AgentICache = NonNullable<AgentPlan["icache_before"]>;

/** How a plan's exact block counts were taken, from its profile's source (the agent writes it): inline
 * counters (counted copies, no trap per block), with uprobes in the same window for the functions that cannot
 * be counted inline, or probes alone (uprobes, kprobes). */
export function exactCountsLabel(plan: AgentPlan): string {
  const source = (plan as { profile?: { source?: string } }).profile?.source ?? "";
  if (!source.includes("(inline counters)")) return "exact (probes)";
  return source.includes("uprobes")
    ? "exact (inline counters; uprobes where a function cannot be counted inline)"
    : "exact (inline counters)";
}

export function heatGrid(ic: AgentICache | null | undefined): HeatGrid | null {
  if (!ic) return null;
  const cells = ic.cells.map((c) => ({
    set: c.set,
    way: c.way,
    line: c.line,
    conflict: c.conflict,
    blocks: [...c.blocks],
  }));
  const ways = Math.max(1, ic.ways);
  const fullest = ic.max_lines_in_a_set;
  return {
    sets: Math.max(1, ic.sets),
    ways,
    columns: Math.max(ways, fullest),
    lineBytes: ic.line_bytes,
    hotLines: ic.hot_lines,
    minimum: ic.minimum_lines,
    distance: ic.distance_to_minimum,
    ratio: ic.ratio,
    conflictSets: ic.conflict_sets,
    fullest,
    hotBytes: ic.hot_bytes,
    cells,
  };
}

/** A plan's body as served (UTF-8 JSON bytes), parsed: in the page's worker for a large plan. */
/** Taken branches before and after a layout, e.g. "77,569 → 49,290 (−36.5%)"; a figure computed from counts. */
export function takenChange(before: number, after: number): string {
  const n = (x: number) => Math.round(x).toLocaleString("en-US");
  if (!(before > 0)) return `${n(before)} → ${n(after)}`;
  const pct = (100 * (after - before)) / before;
  return `${n(before)} → ${n(after)} (${pct < 0 ? "−" : "+"}${Math.abs(pct).toFixed(1)}%)`;
}

export function parsePlanBody(body: ArrayBuffer): AgentPlan {
  return JSON.parse(new TextDecoder().decode(body)) as AgentPlan;
}

export function shapePlan(plan: AgentPlan | null | undefined, estimated: boolean): PlanView {
  const p: Partial<AgentPlan> = plan ?? {};
  const chains: ChainRow[] = [];
  const members: MemberView[] = (p.group ?? []).map((g) => {
    const fn = g.function;
    for (const c of g.chain_table) {
      chains.push({
        fn,
        chain: c.chain,
        bytes: c.bytes,
        weight: c.weight,
        blocks: c.blocks.map((o) => `+0x${o.toString(16)}`).join(" "),
      });
    }
    return {
      fn,
      address: g.address,
      newAddress: g.new_address || null,
      size: g.size,
      hotBytes: g.hot_bytes,
      coldBytes: g.cold_bytes,
      chains: g.chains,
      newHotBytes: g.new_hot_bytes,
      newColdBytes: g.new_cold_bytes,
      jumpTableBytes: g.jump_table_bytes,
      blockLayout: g.block_layout ?? "pettis-hansen",
      takenBefore: g.taken_branches_before ?? 0,
      takenAfter: g.taken_branches_after ?? 0,
      blocks: g.layout.map((b) => ({
        offset: b.offset,
        size: b.size,
        count: b.count,
        hot: b.hot,
        chain: b.chain,
        newAddress: b.new_address || null,
      })),
    };
  });
  chains.sort((a, b) => b.weight - a.weight);
  const code = p.code;
  const hex = code?.hex ?? "";
  const hexLines: string[] = [];
  const base = BigInt(code?.base ?? "0x0");
  for (let i = 0; i < hex.length && hexLines.length < 4096; i += 32) {
    const addr = (base + BigInt(i / 2)).toString(16);
    hexLines.push(
      `0x${addr}  ${hex
        .slice(i, i + 32)
        .replace(/(..)/g, "$1 ")
        .trim()}`,
    );
  }
  const listing = code?.listing
    ? code.listing.map((l) => ({ address: l.address, bytes: l.bytes, text: l.text, from: l.from }))
    : null;
  const totals: Record<string, number> = {};
  // Totals is open (the agent adds figures): every member the console shows is a number.
  for (const [k, v] of Object.entries(p.totals ?? {})) totals[k] = typeof v === "number" ? v : 0;
  return {
    status: p.status ?? "",
    message: p.message ?? "",
    root: p.root ?? "",
    estimated,
    verified: code?.verified === true,
    codeBytes: code?.bytes ?? 0,
    before: heatGrid(p.icache_before),
    after: heatGrid(p.icache_after),
    chains,
    members,
    kept: (p.kept_in_place ?? []).map((k) => ({
      fn: k.function,
      address: k.address,
      rule: k.rule,
      detail: k.detail ?? "",
    })),
    totals,
    notes: [...(p.notes ?? [])],
    listing,
    hexLines,
    bottleneck: p.bottleneck?.note ?? "",
    counts: plan ? exactCountsLabel(plan) : "",
    countsSource: (p as { profile?: { source?: string } }).profile?.source ?? "",
  };
}
