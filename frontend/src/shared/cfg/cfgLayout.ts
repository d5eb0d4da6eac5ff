// SPDX-License-Identifier: Apache-2.0
// A layered (Sugiyama-style) layout for control-flow graphs that stays fast on the largest kernel
// functions (about a thousand blocks): depth-first cycle breaking from the entry, longest-path ranks
// pulled down towards successors, dummy vertices on long edges, barycentre sweeps that keep the
// ordering with the fewest crossings, and x coordinates from alternating neighbour-averaging passes
// solved exactly under the ordering and spacing constraints (pool-adjacent-violators). Every step is
// linear or n·log n in vertices plus dummies. Pure: runs in a Web Worker in the console, and in Node
// for bench/cfg_layout. Why not dagre or ELK: see docs/decisions.md.

export interface LayoutNodeIn {
  id: string;
  width: number;
  height: number;
}

export interface LayoutEdgeIn {
  id: string;
  source: string;
  target: string;
  /** Pull towards a straight vertical edge (fallthrough paths weigh more). */
  weight: number;
}

export interface LayoutOptions {
  nodeSep: number;
  rankSep: number;
  edgeSep: number;
  margin: number;
  /** Barycentre sweeps over all layers (each sweep is one pass down or up). */
  sweeps: number;
  /** Neighbour-averaging passes for x coordinates. */
  coordinatePasses: number;
}

export const DEFAULT_LAYOUT_OPTIONS: LayoutOptions = {
  nodeSep: 28,
  rankSep: 40,
  edgeSep: 12,
  margin: 20,
  sweeps: 8,
  coordinatePasses: 8,
};

export interface Point {
  x: number;
  y: number;
}

export interface LayoutResult {
  width: number;
  height: number;
  /** Centre of every node, by id. */
  positions: Map<string, Point>;
  /** Polyline of every edge from its source to its target, by id (self-loops: empty). */
  routes: Map<string, Point[]>;
  ranks: number;
  dummies: number;
  crossings: number;
}

export type LayoutProgress = (phase: string, fraction: number) => void;

interface Vertex {
  width: number;
  height: number;
  rank: number;
  order: number;
  x: number;
  /** Neighbours in the layer above / below, with the weight of the connecting segment. */
  up: number[];
  upW: number[];
  down: number[];
  downW: number[];
}

/** Lay out a directed graph top to bottom; `entry` (default: the first node) starts the first rank. */
export function layeredLayout(
  nodes: readonly LayoutNodeIn[],
  edges: readonly LayoutEdgeIn[],
  entry?: string,
  options: Partial<LayoutOptions> = {},
  onProgress?: LayoutProgress,
): LayoutResult {
  const opt = { ...DEFAULT_LAYOUT_OPTIONS, ...options };
  const n = nodes.length;
  const index = new Map<string, number>();
  nodes.forEach((nd, i) => index.set(nd.id, i));
  const positions = new Map<string, Point>();
  const routes = new Map<string, Point[]>();
  if (n === 0) return { width: 0, height: 0, positions, routes, ranks: 0, dummies: 0, crossings: 0 };

  // Edges between distinct known nodes; self-loops are drawn by the caller.
  const es: { id: string; u: number; v: number; w: number; reversed: boolean }[] = [];
  for (const e of edges) {
    const u = index.get(e.source);
    const v = index.get(e.target);
    if (u === undefined || v === undefined) continue;
    if (u === v) {
      routes.set(e.id, []);
      continue;
    }
    es.push({ id: e.id, u, v, w: e.weight, reversed: false });
  }
  const out: number[][] = Array.from({ length: n }, () => []);
  es.forEach((e, i) => out[e.u].push(i));

  // 1. Break cycles: depth-first from the entry, then from every unvisited node in input order;
  //    an edge into a node still on the stack is a back edge and is reversed for ranking.
  onProgress?.("ranking", 0);
  const state = new Uint8Array(n); // 0 new, 1 on stack, 2 done
  const dfsOrder: number[] = [];
  const start = entry !== undefined && index.has(entry) ? index.get(entry)! : 0;
  const roots = [start, ...Array.from({ length: n }, (_, i) => i)];
  for (const root of roots) {
    if (state[root]) continue;
    const stack: { v: number; next: number }[] = [{ v: root, next: 0 }];
    state[root] = 1;
    dfsOrder.push(root);
    while (stack.length) {
      const top = stack[stack.length - 1];
      const list = out[top.v];
      if (top.next < list.length) {
        const ei = list[top.next++];
        const w = es[ei].v;
        if (state[w] === 1) es[ei].reversed = true;
        else if (state[w] === 0) {
          state[w] = 1;
          dfsOrder.push(w);
          stack.push({ v: w, next: 0 });
        }
      } else {
        state[top.v] = 2;
        stack.pop();
      }
    }
  }

  // 2. Ranks: longest path over the acyclic orientation, then each node with successors moved down
  //    to just above its nearest successor (shorter edges, fewer dummies).
  const dagOut: number[][] = Array.from({ length: n }, () => []);
  const dagIn: number[][] = Array.from({ length: n }, () => []);
  for (const e of es) {
    const [a, b] = e.reversed ? [e.v, e.u] : [e.u, e.v];
    dagOut[a].push(b);
    dagIn[b].push(a);
  }
  const indeg = dagIn.map((l) => l.length);
  const topo: number[] = [];
  const queue: number[] = [];
  for (const v of dfsOrder) if (indeg[v] === 0) queue.push(v);
  for (let qi = 0; qi < queue.length; qi++) {
    const v = queue[qi];
    topo.push(v);
    for (const w of dagOut[v]) if (--indeg[w] === 0) queue.push(w);
  }
  const rank = new Int32Array(n);
  for (const v of topo) for (const w of dagOut[v]) rank[w] = Math.max(rank[w], rank[v] + 1);
  for (let i = topo.length - 1; i >= 0; i--) {
    const v = topo[i];
    if (v === start || dagOut[v].length === 0) continue;
    let nearest = Infinity;
    for (const w of dagOut[v]) nearest = Math.min(nearest, rank[w]);
    if (nearest - 1 > rank[v]) rank[v] = nearest - 1;
  }
  let maxRank = 0;
  for (let v = 0; v < n; v++) maxRank = Math.max(maxRank, rank[v]);

  // 3. Dummy vertices on edges that span several ranks; a chain per edge in ranking direction.
  onProgress?.("routing long edges", 0.15);
  const verts: Vertex[] = nodes.map((nd, i) => ({
    width: nd.width,
    height: nd.height,
    rank: rank[i],
    order: 0,
    x: 0,
    up: [],
    upW: [],
    down: [],
    downW: [],
  }));
  const chains: number[][] = [];
  for (const e of es) {
    const [a, b] = e.reversed ? [e.v, e.u] : [e.u, e.v];
    const chain = [a];
    for (let r = rank[a] + 1; r < rank[b]; r++) {
      verts.push({ width: opt.edgeSep, height: 0, rank: r, order: 0, x: 0, up: [], upW: [], down: [], downW: [] });
      chain.push(verts.length - 1);
    }
    chain.push(b);
    chains.push(chain);
    // Long straight segments weigh more, so long edges run straight between their ends.
    for (let k = 0; k + 1 < chain.length; k++) {
      const p = chain[k];
      const q = chain[k + 1];
      const inner = (p >= n ? 1 : 0) + (q >= n ? 1 : 0);
      const w = inner === 2 ? 8 : inner === 1 ? 2 : e.w;
      verts[p].down.push(q);
      verts[p].downW.push(w);
      verts[q].up.push(p);
      verts[q].upW.push(w);
    }
  }
  const dummies = verts.length - n;

  // 4. Initial order: depth-first over the layered graph from the entry, successors in edge order,
  //    so blocks keep roughly their address order left to right.
  const layers: number[][] = Array.from({ length: maxRank + 1 }, () => []);
  const seen = new Uint8Array(verts.length);
  const visit = (root: number) => {
    const stack = [root];
    while (stack.length) {
      const v = stack.pop()!;
      if (seen[v]) continue;
      seen[v] = 1;
      layers[verts[v].rank].push(v);
      const d = verts[v].down;
      for (let k = d.length - 1; k >= 0; k--) if (!seen[d[k]]) stack.push(d[k]);
    }
  };
  visit(start);
  for (const v of dfsOrder) visit(v);
  for (let v = 0; v < verts.length; v++) visit(v);
  const setOrders = () =>
    layers.forEach((l) =>
      l.forEach((v, i) => {
        verts[v].order = i;
      }),
    );
  setOrders();

  // 5. Fewer crossings: barycentre sweeps, keeping the best ordering seen.
  onProgress?.("ordering", 0.3);
  let best = layers.map((l) => l.slice());
  let bestCrossings = countCrossings(layers, verts);
  for (let s = 0; s < opt.sweeps && bestCrossings > 0; s++) {
    const downward = s % 2 === 0;
    const rs = downward ? range(1, maxRank + 1) : range(maxRank - 1, -1, -1);
    for (const r of rs) {
      const layer = layers[r];
      const key = new Map<number, number>();
      for (const v of layer) {
        const nb = downward ? verts[v].up : verts[v].down;
        if (nb.length === 0) key.set(v, verts[v].order);
        else {
          let sum = 0;
          for (const w of nb) sum += verts[w].order;
          key.set(v, sum / nb.length);
        }
      }
      layer.sort((a, b) => key.get(a)! - key.get(b)! || verts[a].order - verts[b].order);
      layer.forEach((v, i) => {
        verts[v].order = i;
      });
    }
    const c = countCrossings(layers, verts);
    if (c < bestCrossings) {
      bestCrossings = c;
      best = layers.map((l) => l.slice());
    }
    onProgress?.("ordering", 0.3 + 0.4 * ((s + 1) / opt.sweeps));
  }
  best.forEach((l, r) => {
    layers[r] = l;
  });
  setOrders();

  // 6. x coordinates: pack each layer, then alternate passes pulling every vertex towards the
  //    weighted mean of its neighbours above (or below), solved under the spacing constraints.
  onProgress?.("placing", 0.7);
  const gap = (a: number, b: number) => {
    const va = verts[a];
    const vb = verts[b];
    const sep = a >= n && b >= n ? opt.edgeSep : a >= n || b >= n ? (opt.nodeSep + opt.edgeSep) / 2 : opt.nodeSep;
    return va.width / 2 + vb.width / 2 + sep;
  };
  for (const layer of layers) {
    let x = 0;
    layer.forEach((v, i) => {
      if (i > 0) x += gap(layer[i - 1], v);
      verts[v].x = x;
    });
  }
  for (let p = 0; p < opt.coordinatePasses; p++) {
    const downward = p % 2 === 0;
    const both = p === opt.coordinatePasses - 1;
    const rs = downward ? range(1, maxRank + 1) : range(maxRank - 1, -1, -1);
    for (const r of rs) placeLayer(layers[r], verts, gap, downward, both);
  }

  // 7. y coordinates from the tallest node of each rank; then shift everything into the margin.
  let minX = Infinity;
  let maxX = -Infinity;
  for (const v of verts) {
    minX = Math.min(minX, v.x - v.width / 2);
    maxX = Math.max(maxX, v.x + v.width / 2);
  }
  const rankTop: number[] = [];
  const rankHeight: number[] = [];
  let y = opt.margin;
  for (const layer of layers) {
    let h = 0;
    for (const v of layer) h = Math.max(h, verts[v].height);
    rankTop.push(y);
    rankHeight.push(h);
    y += h + opt.rankSep;
  }
  const dx = opt.margin - minX;
  const cy = (v: number) => rankTop[verts[v].rank] + rankHeight[verts[v].rank] / 2;
  nodes.forEach((nd, i) => positions.set(nd.id, { x: verts[i].x + dx, y: cy(i) }));

  // 8. Edge routes: from the source's bottom through the dummies to the target's top (back edges
  //    leave upwards), as polylines in source → target order.
  onProgress?.("routing edges", 0.95);
  es.forEach((e, i) => {
    const chain = chains[i];
    const pts: Point[] = [];
    chain.forEach((v, k) => {
      const vx = verts[v].x + dx;
      const vy = cy(v);
      if (k === 0) pts.push({ x: vx, y: vy + verts[v].height / 2 });
      else if (k === chain.length - 1) pts.push({ x: vx, y: vy - verts[v].height / 2 });
      else pts.push({ x: vx, y: vy });
    });
    routes.set(e.id, e.reversed ? pts.reverse() : pts);
  });
  onProgress?.("done", 1);
  return {
    width: maxX - minX + 2 * opt.margin,
    height: y - opt.rankSep + opt.margin,
    positions,
    routes,
    ranks: maxRank + 1,
    dummies,
    crossings: bestCrossings,
  };
}

function range(from: number, to: number, step = 1): number[] {
  const out: number[] = [];
  for (let i = from; step > 0 ? i < to : i > to; i += step) out.push(i);
  return out;
}

/** Place one layer: each vertex wants the weighted mean x of its neighbours on one side (or both);
 *  the closest placement keeping the order and minimum gaps is found exactly by pooling adjacent
 *  violators (isotonic regression on x minus the cumulative gaps). */
function placeLayer(
  layer: number[],
  verts: Vertex[],
  gap: (a: number, b: number) => number,
  downward: boolean,
  both: boolean,
) {
  const m = layer.length;
  if (m === 0) return;
  const target = new Float64Array(m);
  const weight = new Float64Array(m);
  const offset = new Float64Array(m);
  for (let i = 0; i < m; i++) {
    const v = verts[layer[i]];
    let sum = 0;
    let wsum = 0;
    const add = (nb: number[], ws: number[]) => {
      for (let k = 0; k < nb.length; k++) {
        sum += verts[nb[k]].x * ws[k];
        wsum += ws[k];
      }
    };
    if (downward || both) add(v.up, v.upW);
    if (!downward || both) add(v.down, v.downW);
    target[i] = wsum > 0 ? sum / wsum : v.x;
    weight[i] = wsum > 0 ? wsum : 0.5;
    offset[i] = i === 0 ? 0 : offset[i - 1] + gap(layer[i - 1], layer[i]);
  }
  // Pool adjacent violators over t_i = target_i − offset_i (the solution is non-decreasing in t).
  const blockMean: number[] = [];
  const blockWeight: number[] = [];
  const blockSize: number[] = [];
  for (let i = 0; i < m; i++) {
    let mean = target[i] - offset[i];
    let w = weight[i];
    let size = 1;
    while (blockMean.length && blockMean[blockMean.length - 1] > mean) {
      const pm = blockMean.pop()!;
      const pw = blockWeight.pop()!;
      size += blockSize.pop()!;
      mean = (pm * pw + mean * w) / (pw + w);
      w += pw;
    }
    blockMean.push(mean);
    blockWeight.push(w);
    blockSize.push(size);
  }
  let i = 0;
  for (let b = 0; b < blockMean.length; b++) {
    for (let k = 0; k < blockSize[b]; k++, i++) verts[layer[i]].x = blockMean[b] + offset[i];
  }
}

/** Crossings between consecutive layers (Barth, Jünger and Mutzel's accumulator tree). */
export function countCrossings(layers: number[][], verts: { order: number; down: number[] }[]): number {
  let total = 0;
  for (let r = 0; r + 1 < layers.length; r++) {
    const south: number[] = [];
    const upper = layers[r].slice().sort((a, b) => verts[a].order - verts[b].order);
    for (const v of upper) {
      const targets = verts[v].down.map((w) => verts[w].order).sort((a, b) => a - b);
      for (const t of targets) south.push(t);
    }
    const q = layers[r + 1].length;
    if (q === 0 || south.length < 2) continue;
    let first = 1;
    while (first < q) first *= 2;
    const tree = new Float64Array(2 * first);
    first -= 1;
    for (const s of south) {
      let idx = s + first;
      tree[idx]++;
      while (idx > 0) {
        if (idx % 2) total += tree[idx + 1];
        idx = (idx - 1) >> 1;
        tree[idx]++;
      }
    }
  }
  return total;
}
