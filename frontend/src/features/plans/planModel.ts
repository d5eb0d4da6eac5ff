// SPDX-License-Identifier: Apache-2.0
// Shapes an agent's plan (hotpathd plan --json, as the backend checked it) into what the plan page
// draws: the I-cache grids before and after (sets × ways, conflicting sets beyond their ways), the
// footprint figures, the chain table, each group function's blocks in layout order coloured hot/cold
// by chain, the kept-in-place exclusions, and the emitted code as a listing. Pure: it runs in a worker.

export interface HeatCell { set: number; way: number; line: string; conflict: boolean; blocks: string[] }
export interface HeatGrid {
  sets: number; ways: number; columns: number; lineBytes: number;
  hotLines: number; minimum: number; distance: number; ratio: number; conflictSets: number; fullest: number;
  hotBytes: number; cells: HeatCell[];
}
export interface ChainRow { fn: string; chain: number; bytes: number; weight: number; blocks: string }
export interface StripBlock { offset: number; size: number; count: number; hot: boolean; chain: number; newAddress: string | null }
export interface MemberView {
  fn: string; address: string; newAddress: string | null; size: number; hotBytes: number; coldBytes: number;
  chains: number; newHotBytes: number; newColdBytes: number; jumpTableBytes: number; blocks: StripBlock[];
}
export interface ListingLine { address: string; bytes: string; text: string; from: string }
export interface PlanView {
  status: string; message: string; root: string; estimated: boolean; verified: boolean; codeBytes: number;
  before: HeatGrid | null; after: HeatGrid | null; chains: ChainRow[]; members: MemberView[];
  kept: { fn: string; address: string; rule: string; detail: string }[];
  totals: Record<string, number>; notes: string[]; listing: ListingLine[] | null; hexLines: string[];
  bottleneck: string;
}

type Json = Record<string, unknown>;
const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
const str = (v: unknown) => (typeof v === "string" ? v : "");
const arr = (v: unknown): Json[] => (Array.isArray(v) ? (v as Json[]) : []);

export function heatGrid(ic: unknown): HeatGrid | null {
  if (!ic || typeof ic !== "object") return null;
  const o = ic as Json;
  const cells = arr(o.cells).map((c) => ({
    set: num(c.set), way: num(c.way), line: str(c.line), conflict: c.conflict === true,
    blocks: Array.isArray(c.blocks) ? (c.blocks as unknown[]).map(String) : [],
  }));
  const ways = Math.max(1, num(o.ways));
  const fullest = num(o.max_lines_in_a_set);
  return {
    sets: Math.max(1, num(o.sets)), ways, columns: Math.max(ways, fullest), lineBytes: num(o.line_bytes),
    hotLines: num(o.hot_lines), minimum: num(o.minimum_lines), distance: num(o.distance_to_minimum),
    ratio: num(o.ratio), conflictSets: num(o.conflict_sets), fullest, hotBytes: num(o.hot_bytes), cells,
  };
}

export function shapePlan(plan: unknown, estimated: boolean): PlanView {
  const p = (plan && typeof plan === "object" ? plan : {}) as Json;
  const group = arr(p.group);
  const chains: ChainRow[] = [];
  const members: MemberView[] = group.map((g) => {
    const fn = str(g.function);
    for (const c of arr(g.chain_table)) {
      const offs = Array.isArray(c.blocks) ? (c.blocks as number[]) : [];
      chains.push({ fn, chain: num(c.chain), bytes: num(c.bytes), weight: num(c.weight),
                    blocks: offs.map((o) => `+0x${o.toString(16)}`).join(" ") });
    }
    return {
      fn, address: str(g.address), newAddress: str(g.new_address) || null, size: num(g.size),
      hotBytes: num(g.hot_bytes), coldBytes: num(g.cold_bytes), chains: num(g.chains),
      newHotBytes: num(g.new_hot_bytes), newColdBytes: num(g.new_cold_bytes), jumpTableBytes: num(g.jump_table_bytes),
      blocks: arr(g.layout).map((b) => ({ offset: num(b.offset), size: num(b.size), count: num(b.count),
                                          hot: b.hot === true, chain: num(b.chain), newAddress: str(b.new_address) || null })),
    };
  });
  chains.sort((a, b) => b.weight - a.weight);
  const code = (p.code && typeof p.code === "object" ? p.code : {}) as Json;
  const hex = str(code.hex);
  const hexLines: string[] = [];
  const base = BigInt(str(code.base) || "0x0");
  for (let i = 0; i < hex.length && hexLines.length < 4096; i += 32) {
    const addr = (base + BigInt(i / 2)).toString(16);
    hexLines.push(`0x${addr}  ${hex.slice(i, i + 32).replace(/(..)/g, "$1 ").trim()}`);
  }
  const listing = Array.isArray(code.listing)
    ? arr(code.listing).map((l) => ({ address: str(l.address), bytes: str(l.bytes), text: str(l.text), from: str(l.from) }))
    : null;
  const totals: Record<string, number> = {};
  for (const [k, v] of Object.entries((p.totals as Json) ?? {})) totals[k] = num(v);
  const bn = (p.bottleneck ?? {}) as Json;
  return {
    status: str(p.status), message: str(p.message), root: str(p.root), estimated, verified: code.verified === true,
    codeBytes: num(code.bytes), before: heatGrid(p.icache_before), after: heatGrid(p.icache_after), chains, members,
    kept: arr(p.kept_in_place).map((k) => ({ fn: str(k.function), address: str(k.address), rule: str(k.rule), detail: str(k.detail) })),
    totals, notes: Array.isArray(p.notes) ? (p.notes as unknown[]).map(String) : [], listing, hexLines,
    bottleneck: str(bn.note),
  };
}
