// SPDX-License-Identifier: Apache-2.0
// Shapes a whole kernel's catalog (modules → functions → basic blocks) into the flat list of
// visible rows the virtualized tree draws. Pure and fast: the catalog is indexed once, then each
// keystroke, sort change or hotness update only filters, sorts and flattens.
import type { Block, FunctionSummary } from "../../api/types";
import { compareHex } from "../../lib/address";

export type SortKey = "name" | "address" | "hotness" | "size" | "blocks";

/** Small generated stubs, grouped under one collapsed row per kind so they do not bury real code. */
export const STUB_GROUPS: { key: string; label: string; test: RegExp }[] = [
  { key: "static_call", label: "static-call trampolines", test: /^__SCT__/ },
  { key: "tracepoint", label: "tracepoint iterators and stubs", test: /^__(traceiter|probestub)_/ },
  {
    key: "thunk",
    label: "retpoline and return thunks",
    test: /^__x86_indirect_|^__x86_return_thunk$|_return_thunk$|^its_.*thunk/,
  },
];

export function stubGroupOf(name: string): string | null {
  for (const g of STUB_GROUPS) if (g.test.test(name)) return g.key;
  return null;
}

/** A search: a substring (the default), a glob with * and ?, a /regular expression/, or an address
 *  (0x… or 16 hex digits) matching the function that holds it. Case-insensitive. */
export type Matcher =
  | { kind: "all" }
  | { kind: "substring"; text: string }
  | { kind: "pattern"; re: RegExp; source: "glob" | "regex" }
  | { kind: "address"; value: bigint }
  | { kind: "invalid"; message: string };

export function compileQuery(query: string): Matcher {
  const q = query.trim();
  if (!q) return { kind: "all" };
  const regex = /^\/(.+)\/([a-z]*)$/.exec(q);
  if (regex) {
    try {
      return {
        kind: "pattern",
        re: new RegExp(regex[1], regex[2].includes("i") ? regex[2] : `${regex[2]}i`),
        source: "regex",
      };
    } catch (e) {
      return { kind: "invalid", message: e instanceof Error ? e.message : "not a regular expression" };
    }
  }
  if (/^0x[0-9a-f]+$/i.test(q) || /^[0-9a-f]{16}$/i.test(q)) {
    return { kind: "address", value: BigInt(q.toLowerCase().startsWith("0x") ? q : `0x${q}`) };
  }
  if (/[*?]/.test(q)) {
    const body = q
      .replace(/[.+^${}()|[\]\\]/g, "\\$&")
      .replace(/\*/g, ".*")
      .replace(/\?/g, ".");
    return { kind: "pattern", re: new RegExp(`^${body}$`, "i"), source: "glob" };
  }
  return { kind: "substring", text: q.toLowerCase() };
}

function matches(m: Matcher, fn: FunctionSummary, lower: string): boolean {
  switch (m.kind) {
    case "all":
      return true;
    case "substring":
      return lower.includes(m.text);
    case "pattern":
      return m.re.test(fn.name);
    case "invalid":
      return false;
    case "address": {
      const start = BigInt(`0x${fn.address_hex}`);
      return m.value >= start && m.value < start + BigInt(Math.max(1, fn.size));
    }
  }
}

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
  | {
      kind: "module";
      key: string;
      level: 1;
      name: string;
      shown: number;
      total: number;
      expanded: boolean;
      posinset: number;
      setsize: number;
    }
  | {
      kind: "group";
      key: string;
      level: 2;
      module: string;
      group: string;
      label: string;
      count: number;
      samplesPerSec: number | null;
      expanded: boolean;
      posinset: number;
      setsize: number;
    }
  | {
      kind: "function";
      key: string;
      level: 2 | 3;
      fn: FunctionSummary;
      samplesPerSec: number | null;
      expanded: boolean;
      posinset: number;
      setsize: number;
    }
  | {
      kind: "block";
      key: string;
      level: 3 | 4;
      fnId: number;
      block: Block;
      samples: number | null;
      posinset: number;
      setsize: number;
    }
  | {
      kind: "status";
      key: string;
      level: 3 | 4;
      fnId: number;
      text: string;
      error: boolean;
      posinset: number;
      setsize: number;
    };

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
    lowerByName.set(
      mod,
      named.map((fn) => fn.name.toLowerCase()),
    );
    lowerByAddress.set(
      mod,
      placed.map((fn) => fn.name.toLowerCase()),
    );
  }
  return { modules: [...groups.keys()].sort(moduleOrder), byName, byAddress, lowerByName, lowerByAddress };
}

/** Samples per second of a function: live hotness when known, else the catalog's figure. */
export function rateOf(fn: FunctionSummary, hotness: ReadonlyMap<number, number> | null): number | null {
  if (hotness) return hotness.get(fn.id) ?? 0;
  return fn.samples_per_sec ?? null;
}

const SORT_VALUE: Record<
  Exclude<SortKey, "name" | "address">,
  (fn: FunctionSummary, hot: ReadonlyMap<number, number> | null) => number
> = {
  hotness: (fn, hot) => rateOf(fn, hot) ?? -1,
  size: (fn) => fn.size,
  blocks: (fn) => fn.block_count,
};

/** Functions of one module matching the query, in the requested order. Numeric sorts default to
 *  largest first; `descending` flips name and address order too. */
export function moduleFunctions(
  index: CatalogIndex,
  module: string,
  query: string | Matcher,
  sort: SortKey,
  hotness: ReadonlyMap<number, number> | null,
  descending?: boolean,
  hotOnly = false,
): FunctionSummary[] {
  const byAddress = sort === "address";
  const base = (byAddress ? index.byAddress : index.byName).get(module) ?? [];
  const m = typeof query === "string" ? compileQuery(query) : query;
  let matched = base;
  if (m.kind !== "all" || hotOnly) {
    const lower = (byAddress ? index.lowerByAddress : index.lowerByName).get(module) ?? [];
    matched = [];
    for (let i = 0; i < base.length; i++) {
      if (hotOnly && !((rateOf(base[i], hotness) ?? 0) > 0)) continue;
      if (matches(m, base[i], lower[i])) matched.push(base[i]);
    }
  }
  if (sort === "name" || sort === "address") return descending ? matched.slice().reverse() : matched;
  // Stable over the name order, so equally hot (mostly idle) functions stay alphabetical.
  const value = SORT_VALUE[sort];
  const sign = descending === false ? 1 : -1;
  return matched.slice().sort((a, b) => sign * (value(a, hotness) - value(b, hotness)));
}

export interface FlattenOptions {
  query: string;
  sort: SortKey;
  /** Default: largest first for numeric sorts, A→Z and low→high addresses otherwise. */
  descending?: boolean;
  hotOnly?: boolean;
  /** Stub groups (`${module}:${group}`) the user opened; the others stay collapsed. */
  expandedGroups?: ReadonlySet<string>;
  hotness: ReadonlyMap<number, number> | null;
  collapsedModules: ReadonlySet<string>;
  expandedFunctions: ReadonlySet<number>;
  blocks: ReadonlyMap<number, BlockState>;
}

export function flattenTree(index: CatalogIndex, opts: FlattenOptions): TreeRow[] {
  const rows: TreeRow[] = [];
  const matcher = compileQuery(opts.query);
  const searching = matcher.kind !== "all" || !!opts.hotOnly;
  const visibleModules: { name: string; fns: FunctionSummary[] }[] = [];
  for (const name of index.modules) {
    const fns = moduleFunctions(index, name, matcher, opts.sort, opts.hotness, opts.descending, opts.hotOnly);
    if (searching && fns.length === 0) continue;
    visibleModules.push({ name, fns });
  }
  const pushFunction = (fn: FunctionSummary, level: 2 | 3, posinset: number, setsize: number) => {
    const fnExpanded = opts.expandedFunctions.has(fn.id);
    rows.push({
      kind: "function",
      key: `f:${fn.id}`,
      level,
      fn,
      samplesPerSec: rateOf(fn, opts.hotness),
      expanded: fnExpanded,
      posinset,
      setsize,
    });
    if (!fnExpanded) return;
    const inner = (level + 1) as 3 | 4;
    const state = opts.blocks.get(fn.id) ?? { status: "loading" };
    if (state.status === "ready") {
      const sorted = state.blocks.slice().sort((a, b) => a.offset - b.offset);
      sorted.forEach((block, bi) => {
        rows.push({
          kind: "block",
          key: `b:${fn.id}:${block.offset}`,
          level: inner,
          fnId: fn.id,
          block,
          samples: state.samples ? (state.samples.get(block.offset) ?? 0) : null,
          posinset: bi + 1,
          setsize: sorted.length,
        });
      });
      if (sorted.length === 0) {
        rows.push({
          kind: "status",
          key: `s:${fn.id}`,
          level: inner,
          fnId: fn.id,
          text: "no basic blocks",
          error: false,
          posinset: 1,
          setsize: 1,
        });
      }
    } else {
      rows.push({
        kind: "status",
        key: `s:${fn.id}`,
        level: inner,
        fnId: fn.id,
        text: state.status === "loading" ? "loading blocks…" : state.message,
        error: state.status === "error",
        posinset: 1,
        setsize: 1,
      });
    }
  };
  visibleModules.forEach(({ name, fns }, mi) => {
    const expanded = !opts.collapsedModules.has(name);
    rows.push({
      kind: "module",
      key: `m:${name}`,
      level: 1,
      name,
      shown: fns.length,
      total: index.byName.get(name)?.length ?? 0,
      expanded,
      posinset: mi + 1,
      setsize: visibleModules.length,
    });
    if (!expanded) return;
    // Stubs go into their groups; a group sits where its first member would be.
    const groups = new Map<string, FunctionSummary[]>();
    const items: ({ fn: FunctionSummary } | { group: string })[] = [];
    for (const fn of fns) {
      const g = opts.expandedGroups === undefined ? null : stubGroupOf(fn.name);
      if (g === null) {
        items.push({ fn });
        continue;
      }
      let list = groups.get(g);
      if (!list) {
        groups.set(g, (list = []));
        items.push({ group: g });
      }
      list.push(fn);
    }
    items.forEach((item, i) => {
      if ("fn" in item) return pushFunction(item.fn, 2, i + 1, items.length);
      const members = groups.get(item.group)!;
      const def = STUB_GROUPS.find((g) => g.key === item.group)!;
      const gkey = `${name}:${item.group}`;
      const open = opts.expandedGroups?.has(gkey) ?? false;
      let rate: number | null = null;
      for (const fn of members) {
        const r = rateOf(fn, opts.hotness);
        if (r !== null) rate = (rate ?? 0) + r;
      }
      rows.push({
        kind: "group",
        key: `g:${gkey}`,
        level: 2,
        module: name,
        group: item.group,
        label: def.label,
        count: members.length,
        samplesPerSec: rate,
        expanded: open,
        posinset: i + 1,
        setsize: items.length,
      });
      if (open) members.forEach((fn, k) => pushFunction(fn, 3, k + 1, members.length));
    });
  });
  return rows;
}

/** Functions from content-addressed catalog pieces (columns, offsets relative to each module's base
 *  on this host), as the tree's summaries. Addresses are exact: computed in BigInt from the base. */
export function summariesFromPieces(
  pieces: readonly {
    module: string;
    digest?: string;
    ids: number[];
    names: string[];
    offsets: number[];
    sizes: number[];
    block_counts: number[];
    undecodable: number[];
  }[],
  baseHex: ReadonlyMap<string, string>,
): FunctionSummary[] {
  const out: FunctionSummary[] = [];
  for (const p of pieces) {
    const base = BigInt(`0x${baseHex.get(p.module) ?? "0"}`);
    const bad = new Set(p.undecodable);
    for (let i = 0; i < p.ids.length; i++) {
      const addr = (base + BigInt(p.offsets[i])) & 0xffffffffffffffffn;
      out.push({
        id: p.ids[i],
        name: p.names[i],
        module: p.module,
        digest: p.digest ?? "",
        index: -1, // the columns are in address order; the catalog index comes with the function's detail
        address: Number(addr),
        address_hex: addr.toString(16),
        size: p.sizes[i],
        block_count: p.block_counts[i],
        samples_per_sec: 0,
        undecodable: bad.has(i),
      });
    }
  }
  return out;
}

/** The hotness response as a lookup table. */
export function hotnessMap(items: readonly { function_id: number; samples_per_sec: number }[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const it of items) m.set(it.function_id, it.samples_per_sec);
  return m;
}
