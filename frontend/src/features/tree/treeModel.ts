// SPDX-License-Identifier: Apache-2.0
// Shapes a whole kernel's catalog (modules → functions → basic blocks) into the flat list of
// visible rows the virtualized tree draws. Pure and fast: the catalog is indexed once, then each
// keystroke, sort change or hotness update only filters, sorts and flattens.
import type { Block, FunctionSummary } from "../../api/types";
import { compareHex } from "../../lib/address";

export type SortKey = "name" | "address" | "hotness";

export interface CatalogIndex {
  /** Module names in display order: vmlinux first, then alphabetical. */
  modules: string[];
  /** Per module, its functions sorted by name and by address (computed once). */
  byName: Map<string, FunctionSummary[]>;
  byAddress: Map<string, FunctionSummary[]>;
  /** Lower-cased names aligned with byName and byAddress, for case-insensitive search without
   *  re-lowering or a lookup per function on every keystroke. */
  lowerByName: Map<string, string[]>;
  lowerByAddress: Map<string, string[]>;
}

export type BlockState =
  | { status: "loading" }
  | { status: "error"; message: string }
  | { status: "ready"; blocks: Block[]; samples: Map<number, number> | null };

export type TreeRow =
  | { kind: "module"; key: string; level: 1; name: string; shown: number; total: number; expanded: boolean; posinset: number; setsize: number }
  | { kind: "function"; key: string; level: 2; fn: FunctionSummary; samplesPerSec: number | null; expanded: boolean; posinset: number; setsize: number }
  | { kind: "block"; key: string; level: 3; fnId: number; block: Block; samples: number | null; posinset: number; setsize: number }
  | { kind: "status"; key: string; level: 3; fnId: number; text: string; error: boolean; posinset: number; setsize: number };

function byNameCmp(a: FunctionSummary, b: FunctionSummary): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : a.id - b.id;
}

function byAddressCmp(a: FunctionSummary, b: FunctionSummary): number {
  return compareHex(a.address_hex, b.address_hex) || a.id - b.id;
}

function moduleOrder(a: string, b: string): number {
  if (a === b) return 0;
  if (a === "vmlinux") return -1;
  if (b === "vmlinux") return 1;
  return a < b ? -1 : 1;
}

export function indexCatalog(functions: readonly FunctionSummary[]): CatalogIndex {
  const groups = new Map<string, FunctionSummary[]>();
  for (const fn of functions) {
    let g = groups.get(fn.module);
    if (!g) groups.set(fn.module, (g = []));
    g.push(fn);
  }
  const byName = new Map<string, FunctionSummary[]>();
  const byAddress = new Map<string, FunctionSummary[]>();
  const lowerByName = new Map<string, string[]>();
  const lowerByAddress = new Map<string, string[]>();
  for (const [mod, list] of groups) {
    const named = list.slice().sort(byNameCmp);
    const placed = list.slice().sort(byAddressCmp);
    byName.set(mod, named);
    byAddress.set(mod, placed);
    lowerByName.set(mod, named.map((fn) => fn.name.toLowerCase()));
    lowerByAddress.set(mod, placed.map((fn) => fn.name.toLowerCase()));
  }
  return { modules: [...groups.keys()].sort(moduleOrder), byName, byAddress, lowerByName, lowerByAddress };
}

/** Samples per second of a function: live hotness when known, else the catalog's figure. */
export function rateOf(fn: FunctionSummary, hotness: ReadonlyMap<number, number> | null): number | null {
  if (hotness) return hotness.get(fn.id) ?? 0;
  return fn.samples_per_sec ?? null;
}

/** Functions of one module matching the query, in the requested order. */
export function moduleFunctions(
  index: CatalogIndex,
  module: string,
  query: string,
  sort: SortKey,
  hotness: ReadonlyMap<number, number> | null,
): FunctionSummary[] {
  const byAddress = sort === "address";
  const base = (byAddress ? index.byAddress : index.byName).get(module) ?? [];
  const q = query.trim().toLowerCase();
  let matched = base;
  if (q) {
    const lower = (byAddress ? index.lowerByAddress : index.lowerByName).get(module) ?? [];
    matched = [];
    for (let i = 0; i < base.length; i++) if (lower[i].includes(q)) matched.push(base[i]);
  }
  if (sort !== "hotness") return matched;
  // Stable over the name order, so equally hot (mostly idle) functions stay alphabetical.
  const rate = (fn: FunctionSummary) => rateOf(fn, hotness) ?? -1;
  return matched.slice().sort((a, b) => rate(b) - rate(a));
}

export interface FlattenOptions {
  query: string;
  sort: SortKey;
  hotness: ReadonlyMap<number, number> | null;
  collapsedModules: ReadonlySet<string>;
  expandedFunctions: ReadonlySet<number>;
  blocks: ReadonlyMap<number, BlockState>;
}

export function flattenTree(index: CatalogIndex, opts: FlattenOptions): TreeRow[] {
  const rows: TreeRow[] = [];
  const searching = opts.query.trim() !== "";
  const visibleModules: { name: string; fns: FunctionSummary[] }[] = [];
  for (const name of index.modules) {
    const fns = moduleFunctions(index, name, opts.query, opts.sort, opts.hotness);
    if (searching && fns.length === 0) continue;
    visibleModules.push({ name, fns });
  }
  visibleModules.forEach(({ name, fns }, mi) => {
    const expanded = !opts.collapsedModules.has(name);
    rows.push({
      kind: "module", key: `m:${name}`, level: 1, name, shown: fns.length,
      total: index.byName.get(name)?.length ?? 0, expanded, posinset: mi + 1, setsize: visibleModules.length,
    });
    if (!expanded) return;
    fns.forEach((fn, fi) => {
      const fnExpanded = opts.expandedFunctions.has(fn.id);
      rows.push({
        kind: "function", key: `f:${fn.id}`, level: 2, fn, samplesPerSec: rateOf(fn, opts.hotness),
        expanded: fnExpanded, posinset: fi + 1, setsize: fns.length,
      });
      if (!fnExpanded) return;
      const state = opts.blocks.get(fn.id) ?? { status: "loading" };
      if (state.status === "ready") {
        const sorted = state.blocks.slice().sort((a, b) => a.offset - b.offset);
        sorted.forEach((block, bi) => {
          rows.push({
            kind: "block", key: `b:${fn.id}:${block.offset}`, level: 3, fnId: fn.id, block,
            samples: state.samples ? state.samples.get(block.offset) ?? 0 : null,
            posinset: bi + 1, setsize: sorted.length,
          });
        });
        if (sorted.length === 0) {
          rows.push({ kind: "status", key: `s:${fn.id}`, level: 3, fnId: fn.id, text: "no basic blocks", error: false, posinset: 1, setsize: 1 });
        }
      } else {
        rows.push({
          kind: "status", key: `s:${fn.id}`, level: 3, fnId: fn.id,
          text: state.status === "loading" ? "loading blocks…" : state.message,
          error: state.status === "error", posinset: 1, setsize: 1,
        });
      }
    });
  });
  return rows;
}

/** The hotness response as a lookup table. */
export function hotnessMap(items: readonly { function_id: number; samples_per_sec: number }[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const it of items) m.set(it.function_id, it.samples_per_sec);
  return m;
}
