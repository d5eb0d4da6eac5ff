// SPDX-License-Identifier: Apache-2.0
// The flame graph's tree from the API's distinct paths (frame indices root first, each with its samples),
// built in the flame worker: paths merged into a tree (a child per distinct frame under each node), each
// node's total and self samples, children heaviest first in pre-order, and trees larger than maxNodes cut
// (the lightest nodes folded into their parents, their samples counted in `folded`). Pure, unit tested.

/** The API's distinct paths: `frame` holds every path's frames root first, one after the other;
 *  `length[k]` frames are path k's, with `samples[k]` samples. */
export interface FlamePaths {
  frame: ArrayLike<number>;
  length: ArrayLike<number>;
  samples: ArrayLike<number>;
}

/** A tree in pre-order (root first, frame -1), children heaviest first (ties in the order first seen). */
export interface FlameTree {
  frame: Int32Array;
  parent: Int32Array;
  total: Float64Array;
  self: Float64Array;
  /** Samples of the nodes folded into their parents. */
  folded: number;
}

/** A tree larger than this is cut: its lightest nodes are folded into their parents. */
export const MAX_NODES = 150_000;

export function buildTree(paths: FlamePaths, maxNodes = MAX_NODES): FlameTree {
  // Merge: node 0 is the root; a node's children found by (node, frame). Nodes are numbered as first
  // seen, so a parent's number is below its children's.
  const frameOf: number[] = [-1];
  const parentOf: number[] = [-1];
  const own: number[] = [0];
  const child = new Map<number, number>();
  let width = 1;
  for (let k = 0; k < paths.frame.length; k++) width = Math.max(width, paths.frame[k] + 2);
  let at = 0;
  for (let p = 0; p < paths.length.length; p++) {
    let node = 0;
    for (const stop = at + paths.length[p]; at < stop; at++) {
      const key = node * width + paths.frame[at] + 1;
      let next = child.get(key);
      if (next === undefined) {
        next = frameOf.length;
        child.set(key, next);
        frameOf.push(paths.frame[at]);
        parentOf.push(node);
        own.push(0);
      }
      node = next;
    }
    own[node] += paths.samples[p];
  }
  const n = frameOf.length;
  const total = Float64Array.from(own);
  const self = Float64Array.from(own);
  for (let i = n - 1; i > 0; i--) total[parentOf[i]] += total[i];
  // Heaviest first, ties by number (a parent before its children, so the kept nodes are a tree).
  const order = Array.from({ length: n - 1 }, (_, i) => i + 1).sort((a, b) => total[b] - total[a] || a - b);
  let folded = 0;
  let keep = order;
  if (n > maxNodes) {
    keep = order.slice(0, Math.max(0, maxNodes - 1));
    const kept = new Uint8Array(n);
    kept[0] = 1;
    for (const i of keep) kept[i] = 1;
    for (let j = keep.length; j < order.length; j++) {
      const i = order[j];
      if (kept[parentOf[i]]) {
        self[parentOf[i]] += total[i];
        folded += total[i];
      }
    }
  }
  // Children lists (heaviest first), then a pre-order walk.
  const count = new Int32Array(n + 1);
  for (const i of keep) count[parentOf[i] + 1]++;
  for (let i = 0; i < n; i++) count[i + 1] += count[i];
  const kids = new Int32Array(keep.length);
  const fill = count.slice(0, n);
  for (const i of keep) kids[fill[parentOf[i]]++] = i;
  const m = keep.length + 1;
  const out = {
    frame: new Int32Array(m),
    parent: new Int32Array(m),
    total: new Float64Array(m),
    self: new Float64Array(m),
    folded,
  };
  const pos = new Int32Array(n);
  const stack = [0];
  let next = 0;
  while (stack.length) {
    const node = stack.pop()!;
    pos[node] = next;
    out.frame[next] = frameOf[node];
    out.parent[next] = node ? pos[parentOf[node]] : -1;
    out.total[next] = total[node];
    out.self[next] = self[node];
    next++;
    for (let c = count[node + 1] - 1; c >= count[node]; c--) stack.push(kids[c]);
  }
  return out;
}
