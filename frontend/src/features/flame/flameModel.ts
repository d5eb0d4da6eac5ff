// SPDX-License-Identifier: Apache-2.0
// The flame graph's model, pure: the API's tree (nodes in pre-order, children heaviest first) laid out
// as fractions of the root's width per node and a depth, zoom into a node (its ancestors span the whole
// width), the cells worth drawing at a pixel width, search with the share of samples it matches, paths
// that name a node across refreshes, and colours — by frame kind, or by change for a differential graph
// (D3's diverging scale). Runs in a worker for big trees (flame.worker.ts) and in unit tests.
import { scaleDiverging } from "d3-scale";
import { interpolateRdBu } from "d3-scale-chromatic";

export interface FlameFrame {
  name: string;
  module: string;
  kind: "kernel" | "kernel_address" | "user" | "user_address";
  function_id: number | null;
}

/** A tree in pre-order, children heaviest first (flameTree.ts builds the flame graph's from the API's
 *  paths; the differential graph's comes from the API as such). For a differential graph `total`/`self`
 *  are range A's and `bTotal`/`bSelf` range B's. */
export interface FlameInput {
  frames: FlameFrame[];
  frame: ArrayLike<number>;
  parent: ArrayLike<number>;
  total: ArrayLike<number>;
  self: ArrayLike<number>;
  bTotal?: ArrayLike<number>;
  bSelf?: ArrayLike<number>;
}

export interface FlameLayout {
  n: number;
  frame: Int32Array;
  parent: Int32Array;
  depth: Int32Array;
  /** Exclusive end of each node's subtree in pre-order (its descendants are i+1 .. end-1). */
  end: Int32Array;
  /** Left edge and width as fractions of the root. */
  x0: Float64Array;
  w: Float64Array;
  total: Float64Array;
  self: Float64Array;
  maxDepth: number;
  /** Differential: per node B's share of B's samples minus A's share of A's (−1 … 1). */
  delta: Float64Array | null;
  bTotal: Float64Array | null;
  bSelf: Float64Array | null;
  /** Samples of the root (A's, or both ranges' shares averaged for a differential graph: see weight). */
  rootTotal: number;
  bRootTotal: number;
}

/** Lay a tree out. A differential graph's widths are the average of a node's share in A and in B, so
 *  what exists in only one of them is still visible; its colour says which way it changed. */
export function layoutFlame(input: FlameInput): FlameLayout {
  const n = input.frame.length;
  const frame = Int32Array.from(input.frame);
  const parent = Int32Array.from(input.parent);
  const total = Float64Array.from(input.total);
  const self = Float64Array.from(input.self);
  const bTotal = input.bTotal ? Float64Array.from(input.bTotal) : null;
  const bSelf = input.bSelf ? Float64Array.from(input.bSelf) : null;
  const depth = new Int32Array(n);
  const end = new Int32Array(n);
  const x0 = new Float64Array(n);
  const w = new Float64Array(n);
  const cursor = new Float64Array(n);
  const rootA = n ? total[0] : 0;
  const rootB = n && bTotal ? bTotal[0] : 0;
  const weight = (i: number) => {
    if (!bTotal) return rootA > 0 ? total[i] / rootA : 0;
    const a = rootA > 0 ? total[i] / rootA : 0;
    const b = rootB > 0 ? bTotal[i] / rootB : 0;
    return rootA > 0 && rootB > 0 ? (a + b) / 2 : a + b;
  };
  let maxDepth = 0;
  if (n) {
    w[0] = 1;
    end.fill(n);
  }
  for (let i = 1; i < n; i++) {
    const p = parent[i];
    depth[i] = depth[p] + 1;
    if (depth[i] > maxDepth) maxDepth = depth[i];
    x0[i] = x0[p] + cursor[p];
    w[i] = weight(i);
    cursor[p] += w[i];
  }
  // Subtree ends: a node's subtree ends where the next node that is not its descendant starts.
  const stack: number[] = [];
  for (let i = 0; i < n; i++) {
    while (stack.length && depth[stack[stack.length - 1]] >= depth[i]) end[stack.pop()!] = i;
    stack.push(i);
  }
  while (stack.length) end[stack.pop()!] = n;
  let delta: Float64Array | null = null;
  if (bTotal) {
    delta = new Float64Array(n);
    for (let i = 0; i < n; i++) delta[i] = (rootB > 0 ? bTotal[i] / rootB : 0) - (rootA > 0 ? total[i] / rootA : 0);
  }
  return {
    n,
    frame,
    parent,
    depth,
    end,
    x0,
    w,
    total,
    self,
    maxDepth,
    delta,
    bTotal,
    bSelf,
    rootTotal: rootA,
    bRootTotal: rootB,
  };
}

/** Whether a is b or one of b's ancestors. */
export function isAncestorOrSelf(l: FlameLayout, a: number, b: number): boolean {
  return a <= b && b < l.end[a];
}

export interface Cell {
  node: number;
  /** In pixels within the drawing's width. */
  x: number;
  width: number;
  depth: number;
}

/** The cells to draw when zoomed into `focus` (0: the whole tree) at `widthPx`: the focus's ancestors
 *  across the whole width, and the focus's subtree scaled to it, leaving out anything narrower than
 *  minPx (with its whole subtree, which is narrower still). */
export function visibleCells(l: FlameLayout, focus: number, widthPx: number, minPx = 0.5): Cell[] {
  const out: Cell[] = [];
  if (!l.n) return out;
  const f = focus >= 0 && focus < l.n ? focus : 0;
  const fx = l.x0[f];
  const fw = l.w[f] || 1;
  for (let a = l.parent[f]; a >= 0; a = l.parent[a]) out.push({ node: a, x: 0, width: widthPx, depth: l.depth[a] });
  out.reverse();
  for (let i = f; i < l.end[f];) {
    const width = (l.w[i] / fw) * widthPx;
    if (width < minPx) {
      i = l.end[i];
      continue;
    }
    out.push({ node: i, x: ((l.x0[i] - fx) / fw) * widthPx, width, depth: l.depth[i] });
    i++;
  }
  return out;
}

/** A matcher for a search text: "/regex/" or a case-insensitive substring; null for an empty or invalid
 *  query. */
export function matcher(query: string): ((name: string) => boolean) | null {
  const q = query.trim();
  if (!q) return null;
  const re = /^\/(.+)\/([a-z]*)$/.exec(q);
  if (re) {
    try {
      const r = new RegExp(re[1], re[2].includes("i") ? re[2] : `${re[2]}i`);
      return (name) => r.test(name);
    } catch {
      return null;
    }
  }
  const lower = q.toLowerCase();
  return (name) => name.toLowerCase().includes(lower);
}

export interface SearchResult {
  matches: Uint8Array;
  /** Nodes that match. */
  count: number;
  /** Samples under matching nodes, each sample counted once (nested matches are not added twice). */
  samples: number;
  share: number;
}

export function search(l: FlameLayout, frames: FlameFrame[], query: string): SearchResult | null {
  const m = matcher(query);
  if (!m) return null;
  const byFrame = new Map<number, boolean>();
  const matches = new Uint8Array(l.n);
  let count = 0;
  let samples = 0;
  let coveredUntil = -1;
  for (let i = 1; i < l.n; i++) {
    const fr = l.frame[i];
    let hit = byFrame.get(fr);
    if (hit === undefined) {
      hit = fr >= 0 && fr < frames.length && m(frames[fr].name);
      byFrame.set(fr, hit);
    }
    if (!hit) continue;
    matches[i] = 1;
    count++;
    if (i >= coveredUntil) {
      samples += l.total[i] + (l.bTotal ? l.bTotal[i] : 0);
      coveredUntil = l.end[i];
    }
  }
  const root = l.rootTotal + l.bRootTotal;
  return { matches, count, samples, share: root > 0 ? samples / root : 0 };
}

/** The names from the root to a node, ";"-separated: how the URL names a zoomed node, stable while the
 *  data refreshes. */
export function pathOf(l: FlameLayout, frames: FlameFrame[], node: number): string {
  const names: string[] = [];
  for (let a = node; a > 0; a = l.parent[a]) names.push(frames[l.frame[a]]?.name ?? "?");
  return names.reverse().join(";");
}

/** The node a path names, or the deepest one found along it (0 for the root or an empty path). */
export function findPath(l: FlameLayout, frames: FlameFrame[], path: string): number {
  if (!path || !l.n) return 0;
  let node = 0;
  for (const name of path.split(";")) {
    let next = -1;
    for (let c = node + 1; c < l.end[node]; c = l.end[c]) {
      if (frames[l.frame[c]]?.name === name) {
        next = c;
        break;
      }
    }
    if (next < 0) break;
    node = next;
  }
  return node;
}

/** A stable hash of a name, for colours that do not change between refreshes. */
function hash(name: string): number {
  let h = 2166136261;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 16777619);
  return (h >>> 0) / 4294967296;
}

/** Warm colours for kernel code, green for user code, grey for addresses outside known code. */
export function frameColour(f: FlameFrame | undefined): string {
  if (!f) return "#d0d7de";
  const t = hash(f.name);
  if (f.kind === "kernel")
    return `hsl(${Math.round(8 + 40 * t)}, ${Math.round(78 + 12 * t)}%, ${Math.round(58 + 10 * t)}%)`;
  if (f.kind === "user") return `hsl(${Math.round(95 + 40 * t)}, 45%, ${Math.round(55 + 12 * t)}%)`;
  return `hsl(210, 8%, ${Math.round(70 + 12 * t)}%)`;
}

/** Differential colours: red where B's share grew, blue where it shrank, white where it held, on a
 *  symmetric scale up to the largest change (at least one percentage point, so noise stays pale). */
export function diffColour(l: FlameLayout): (node: number) => string {
  const d = l.delta;
  if (!d) return () => "#d0d7de";
  let m = 0.01;
  for (let i = 1; i < l.n; i++) m = Math.max(m, Math.abs(d[i]));
  const scale = scaleDiverging((t: number) => interpolateRdBu(1 - t)).domain([-m, 0, m]);
  return (node) => scale(d[node]);
}

/** Samples per second of a node over a range of `seconds`. */
export function rate(samples: number, seconds: number): number {
  return seconds > 0 ? samples / seconds : 0;
}
