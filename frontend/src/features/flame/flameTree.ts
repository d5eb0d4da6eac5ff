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
  // Merge: node 0 is the root; a node's children found by (node, frame) in an open-addressing hash table
  // of typed arrays (a Map keyed by node * frames + frame held numbers past the small-integer range,
  // slow to hash). Nodes are numbered as first seen, so a parent's number is below its children's.
  const steps = paths.frame.length;
  const frameOf = new Int32Array(steps + 1);
  const parentOf = new Int32Array(steps + 1);
  const own = new Float64Array(steps + 1);
  frameOf[0] = parentOf[0] = -1;
  let slots = 1024;
  while (slots < 2 * (steps + 1)) slots *= 2;
  const mask = slots - 1;
  const slotNode = new Int32Array(slots).fill(-1);
  const slotFrame = new Int32Array(slots);
  const slotChild = new Int32Array(slots);
  let n = 1;
  let at = 0;
  for (let p = 0; p < paths.length.length; p++) {
    let node = 0;
    for (const stop = at + paths.length[p]; at < stop; at++) {
      const f = paths.frame[at];
      let h = (Math.imul(node, 0x9e3779b1) ^ Math.imul(f + 1, 0x85ebca6b)) & mask;
      while (slotNode[h] !== -1 && (slotNode[h] !== node || slotFrame[h] !== f)) h = (h + 1) & mask;
      if (slotNode[h] === -1) {
        slotNode[h] = node;
        slotFrame[h] = f;
        slotChild[h] = n;
        frameOf[n] = f;
        parentOf[n] = node;
        n++;
      }
      node = slotChild[h];
    }
    own[node] += paths.samples[p];
  }
  const total = own.slice(0, n);
  const self = own.slice(0, n);
  for (let i = n - 1; i > 0; i--) total[parentOf[i]] += total[i];
  const order = heaviestFirst(total);
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

/** Nodes 1 .. n - 1 by total, heaviest first, ties by number (a parent before its children, so the kept
 *  nodes are a tree). Whole totals (samples) sort as one number each, total * 2^bits + (2^bits - 1 -
 *  node), in a typed array's numeric sort, several times faster than a comparator's on an hour's
 *  ~300,000 nodes; other totals, or keys past 2^53, sort with the comparator. */
function heaviestFirst(total: Float64Array): number[] {
  const n = total.length;
  let bits = 1;
  while (2 ** bits < n) bits++;
  const scale = 2 ** bits;
  let exact = true;
  for (let i = 1; i < n && exact; i++)
    exact = Number.isInteger(total[i]) && total[i] >= 0 && total[i] * scale < 2 ** 53;
  if (!exact) return Array.from({ length: n - 1 }, (_, i) => i + 1).sort((a, b) => total[b] - total[a] || a - b);
  const keys = new Float64Array(n - 1);
  for (let i = 1; i < n; i++) keys[i - 1] = total[i] * scale + (scale - 1 - i);
  keys.sort();
  const order = new Array<number>(n - 1);
  for (let j = 0; j < n - 1; j++) order[j] = scale - 1 - (keys[n - 2 - j] % scale);
  return order;
}
