// SPDX-License-Identifier: Apache-2.0
// Everything a view shows is in its URL, so a link reproduces the view and Back restores the previous
// one: the time range, tab, search, sort, filters, pages, compare ranges and the selected block. Pure
// readers and writers of URLSearchParams (defaults are left out, keeping links short), and one hook.
import { useCallback, useMemo } from "react";
import { useSearchParams } from "react-router-dom";
import { parseRange, rangeParams, type TimeRange } from "./timeRange";

/** `search` with `change` applied: each key set to its value, or removed where the value is null. */
export function withParams(search: URLSearchParams, change: Record<string, string | null>): URLSearchParams {
  const next = new URLSearchParams(search);
  for (const [k, v] of Object.entries(change)) {
    if (v === null) next.delete(k);
    else next.set(k, v);
  }
  return next;
}

export type HostTab = "code" | "top" | "flame" | "compare" | "layout";
export const HOST_TABS: HostTab[] = ["code", "top", "flame", "compare", "layout"];

export type TreeSort = "hotness" | "name" | "address" | "size" | "blocks";
export type TopSort = "samples" | "inclusive" | "name" | "module";
export type IdleMode = "exclude" | "include" | "only";

/** The samples stack views show: a process, a command, a CPU (null: any) and the idle task's samples. */
export interface StackFilterView {
  pid: number | null;
  comm: string | null;
  cpu: number | null;
  idle: IdleMode;
}

export interface HostView {
  tab: HostTab;
  range: TimeRange;
  /** Code tab */
  q: string;
  treeSort: TreeSort;
  treeDesc: boolean;
  hotOnly: boolean;
  /** Functions ticked in the tree for measurement (kernel function ids, in the order ticked). */
  picked: number[];
  /** Top functions tab */
  topSort: TopSort;
  topDesc: boolean;
  page: number;
  idle: boolean;
  /** Compare tab: range A is `range`; B is its own range and optionally another host. */
  bRange: TimeRange | null;
  bHost: string | null;
  /** Live views refresh unless paused. */
  paused: boolean;
  /** Flame graph tab (the filter and orientation also serve the compare tab's differential flame graph). */
  filter: StackFilterView;
  flameQuery: string;
  /** The zoomed frame, named by the frames from the root ("a;b;c"). */
  flameZoom: string;
  icicle: boolean;
  /** Compare tab's differential flame graph: its own search and zoom, so the flame tab's do not leak in. */
  diffQuery: string;
  diffZoom: string;
  /** Compare tab: the table or the differential flame graph. */
  compareView: "table" | "flame";
}

const TREE_SORTS: TreeSort[] = ["hotness", "name", "address", "size", "blocks"];
const TOP_SORTS: TopSort[] = ["samples", "inclusive", "name", "module"];
const IDLE_MODES: IdleMode[] = ["exclude", "include", "only"];

function intParam(v: string | null, max: number): number | null {
  if (v === null || !/^\d{1,16}$/.test(v)) return null;
  const n = Number(v);
  return n <= max ? n : null;
}

/** At most this many functions ride in a link (a measurement of more is picked on the measure page). */
export const MAX_PICKED = 200;

/** A comma-separated list of function ids ("12,40,7"): duplicates and anything not an id dropped. */
export function readIdList(v: string | null): number[] {
  if (!v) return [];
  const out: number[] = [];
  for (const part of v.split(",")) {
    const n = intParam(part.trim(), Number.MAX_SAFE_INTEGER);
    if (n !== null && !out.includes(n)) out.push(n);
    if (out.length >= MAX_PICKED) break;
  }
  return out;
}

export function writeIdList(ids: readonly number[]): string | null {
  return ids.length ? ids.join(",") : null;
}

/** The measure page of a target with these functions already picked. */
export function measureLink(hostId: string, target: string, functionIds: readonly number[]): string {
  const p = new URLSearchParams({ target });
  const fn = writeIdList(functionIds);
  if (fn) p.set("fn", fn);
  return `/hosts/${encodeURIComponent(hostId)}/measure?${p.toString()}`;
}

export function readStackFilter(p: URLSearchParams): StackFilterView {
  const idle = p.get("fidle") as IdleMode | null;
  const comm = p.get("comm");
  return {
    pid: intParam(p.get("pid"), 2 ** 31 - 1),
    comm: comm && comm.length <= 64 ? comm : null,
    cpu: intParam(p.get("cpu"), 65535),
    idle: idle && IDLE_MODES.includes(idle) ? idle : "exclude",
  };
}

export function writeStackFilter(f: StackFilterView, p: URLSearchParams): void {
  const set = (k: string, value: string | null) => (value === null ? p.delete(k) : p.set(k, value));
  set("pid", f.pid === null ? null : String(f.pid));
  set("comm", f.comm);
  set("cpu", f.cpu === null ? null : String(f.cpu));
  set("fidle", f.idle === "exclude" ? null : f.idle);
}

export function readHostView(p: URLSearchParams): HostView {
  const tab = p.get("tab");
  const treeSort = p.get("sort") as TreeSort | null;
  const topSort = p.get("tsort") as TopSort | null;
  const page = Number(p.get("page") ?? "1");
  return {
    tab: HOST_TABS.includes(tab as HostTab) ? (tab as HostTab) : "code",
    range: parseRange(p.get("from"), p.get("to")),
    q: p.get("q") ?? "",
    treeSort: treeSort && TREE_SORTS.includes(treeSort) ? treeSort : "hotness",
    treeDesc: p.get("dir") !== "asc",
    hotOnly: p.get("hot") === "1",
    picked: readIdList(p.get("pick")),
    topSort: topSort && TOP_SORTS.includes(topSort) ? topSort : "samples",
    topDesc: p.get("tdir") !== "asc",
    page: Number.isInteger(page) && page >= 1 && page <= 100000 ? page : 1,
    idle: p.get("idle") === "1",
    bRange: p.get("b_from") ? parseRange(p.get("b_from"), p.get("b_to")) : null,
    bHost: p.get("b_host") || null,
    paused: p.get("paused") === "1",
    filter: readStackFilter(p),
    flameQuery: p.get("fq") ?? "",
    flameZoom: p.get("fzoom") ?? "",
    icicle: p.get("forient") === "icicle",
    diffQuery: p.get("dq") ?? "",
    diffZoom: p.get("dzoom") ?? "",
    compareView: p.get("cview") === "flame" ? "flame" : "table",
  };
}

/** The URL parameters of a view; parameters at their default are left out. Unknown parameters of
 *  `base` (other views' state) are kept. */
export function writeHostView(v: HostView, base: URLSearchParams = new URLSearchParams()): URLSearchParams {
  const p = new URLSearchParams(base);
  const set = (k: string, value: string | null) => (value === null ? p.delete(k) : p.set(k, value));
  set("tab", v.tab === "code" ? null : v.tab);
  const r = rangeParams(v.range);
  set("from", r.from);
  set("to", r.to);
  set("q", v.q || null);
  set("sort", v.treeSort === "hotness" ? null : v.treeSort);
  set("dir", v.treeDesc ? null : "asc");
  set("hot", v.hotOnly ? "1" : null);
  set("pick", writeIdList(v.picked));
  set("tsort", v.topSort === "samples" ? null : v.topSort);
  set("tdir", v.topDesc ? null : "asc");
  set("page", v.page > 1 ? String(v.page) : null);
  set("idle", v.idle ? "1" : null);
  const b = v.bRange ? rangeParams(v.bRange) : null;
  set("b_from", b ? b.from : null);
  set("b_to", b ? b.to : null);
  set("b_host", v.bHost);
  set("paused", v.paused ? "1" : null);
  writeStackFilter(v.filter, p);
  set("fq", v.flameQuery || null);
  set("fzoom", v.flameZoom || null);
  set("forient", v.icicle ? "icicle" : null);
  set("dq", v.diffQuery || null);
  set("dzoom", v.diffZoom || null);
  set("cview", v.compareView === "flame" ? "flame" : null);
  return p;
}

export interface FunctionView {
  range: TimeRange;
  /** Offset of the selected block. */
  block: number | null;
  scale: "linear" | "log";
}

export function readFunctionView(p: URLSearchParams): FunctionView {
  const b = p.get("block");
  const offset = b && /^(0x)?[0-9a-f]+$/i.test(b) ? parseInt(b.replace(/^0x/i, ""), 16) : null;
  return {
    range: parseRange(p.get("from"), p.get("to")),
    block: offset !== null && Number.isSafeInteger(offset) ? offset : null,
    scale: p.get("scale") === "log" ? "log" : "linear",
  };
}

export function writeFunctionView(v: FunctionView, base: URLSearchParams = new URLSearchParams()): URLSearchParams {
  const p = new URLSearchParams(base);
  const r = rangeParams(v.range);
  p.set("from", r.from);
  p.set("to", r.to);
  if (v.block === null) p.delete("block");
  else p.set("block", `0x${v.block.toString(16)}`);
  if (v.scale === "linear") p.delete("scale");
  else p.set("scale", v.scale);
  return p;
}

/** Only the range parameters, to carry the range along links between views. */
export function rangeSearch(range: TimeRange): string {
  const r = rangeParams(range);
  return `from=${encodeURIComponent(r.from)}&to=${encodeURIComponent(r.to)}`;
}

export interface UpdateOptions {
  /** A new history entry (Back returns here); false replaces the current one (typing, for example). */
  push?: boolean;
}

/** A typed view kept in the URL: read on every render, written with push or replace. */
export function useUrlView<V>(
  read: (p: URLSearchParams) => V,
  write: (v: V, base: URLSearchParams) => URLSearchParams,
) {
  const [params, setParams] = useSearchParams();
  const view = useMemo(() => read(params), [params, read]);
  const update = useCallback(
    (patch: Partial<V>, options: UpdateOptions = {}) => {
      setParams((prev) => write({ ...read(prev), ...patch }, prev), { replace: !(options.push ?? true) });
    },
    [setParams, read, write],
  );
  return [view, update] as const;
}
