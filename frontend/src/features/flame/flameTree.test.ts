// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { buildTree, type FlamePaths, type FlameTree } from "./flameTree";

/** Paths as [frames root first, samples] pairs, flattened as the API sends them. */
function flat(list: [number[], number][]): FlamePaths {
  return { frame: list.flatMap(([f]) => f), length: list.map(([f]) => f.length), samples: list.map(([, n]) => n) };
}

/** {frames from the root joined by '/': [total, self]} of a tree. */
function byPath(t: FlameTree): Record<string, [number, number]> {
  const names: string[] = [];
  const out: Record<string, [number, number]> = {};
  for (let i = 0; i < t.frame.length; i++) {
    names.push(t.parent[i] < 0 ? "" : `${names[t.parent[i]]}/${t.frame[i]}`);
    out[names[i]] = [t.total[i], t.self[i]];
  }
  return out;
}

/** The reference: every prefix of every path gets the path's samples in its total, its end in self. */
function reference(list: [number[], number][]): Record<string, [number, number]> {
  const out: Record<string, [number, number]> = { "": [0, 0] };
  for (const [frames, n] of list) {
    out[""][0] += n;
    let key = "";
    for (const f of frames) {
      key += `/${f}`;
      out[key] ??= [0, 0];
      out[key][0] += n;
    }
    out[key][1] += n;
  }
  return out;
}

function heaviestFirst(t: FlameTree): boolean {
  for (let p = 0; p < t.frame.length; p++) {
    const kids = [...t.parent.keys()].filter((i) => t.parent[i] === p).map((i) => t.total[i]);
    if (kids.some((w, k) => k > 0 && w > kids[k - 1])) return false;
  }
  return true;
}

/** A repeatable random integer below n, from a linear congruential generator. */
function seeded(seed: number): (n: number) => number {
  return (n) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
}

describe("buildTree", () => {
  const paths: [number[], number][] = [
    [[0, 1, 2], 40], // entry → ksys_read → vfs_read
    [[0, 1], 20], // ksys_read's own samples
    [[0, 3], 30], // entry → do_sys_open
    [[4], 10], // a user frame at the root
    [[0, 1, 2], 5], // the same path again (two stacks merged to one path by the server) adds up
    [[], 7], // an empty stack: the root's own samples
  ];

  it("merges paths into a tree, root first, with each node's total and self samples", () => {
    const t = buildTree(flat(paths));
    expect(byPath(t)).toEqual(reference(paths));
    expect(t.folded).toBe(0);
    expect(t.frame[0]).toBe(-1);
    expect(t.parent[0]).toBe(-1);
  });

  it("lists nodes in pre-order, children heaviest first", () => {
    const t = buildTree(flat(paths));
    expect(Array.from(t.frame)).toEqual([-1, 0, 1, 2, 3, 4]);
    expect(Array.from(t.parent)).toEqual([-1, 0, 1, 2, 1, 0]);
    for (let i = 1; i < t.frame.length; i++) expect(t.parent[i]).toBeLessThan(i);
    expect(heaviestFirst(t)).toBe(true);
  });

  it("cuts a tree larger than maxNodes, folding the lightest nodes into their parents", () => {
    const t = buildTree(flat(paths), 4);
    // Kept: root, entry (105), ksys_read (65), vfs_read (45); do_sys_open (30) and the user frame (10)
    // fold into entry and the root.
    expect(byPath(t)).toEqual({ "": [112, 17], "/0": [95, 30], "/0/1": [65, 20], "/0/1/2": [45, 45] });
    expect(t.folded).toBe(40);
    // No sample is lost: the kept nodes' self samples add up to the root's total.
    expect(t.self.reduce((a, b) => a + b, 0)).toBe(t.total[0]);
  });

  it("builds the same tree as the reference for random paths, and keeps samples when cut", () => {
    const rand = seeded(7);
    const list: [number[], number][] = Array.from({ length: 400 }, () => [
      Array.from({ length: 1 + rand(12) }, () => rand(9)),
      1 + rand(50),
    ]);
    const t = buildTree(flat(list));
    expect(byPath(t)).toEqual(reference(list));
    expect(heaviestFirst(t)).toBe(true);
    const cut = buildTree(flat(list), 100);
    expect(cut.frame.length).toBe(100);
    expect(cut.total[0]).toBe(t.total[0]);
    expect(cut.self.reduce((a, b) => a + b, 0)).toBe(cut.total[0]);
    expect(heaviestFirst(cut)).toBe(true);
  });

  it("orders and cuts whole totals (sorted as one number each) as the comparator does other totals", () => {
    const rand = seeded(11);
    // Few distinct sample counts: many ties, broken by node number in both orders.
    const list: [number[], number][] = Array.from({ length: 600 }, () => [
      Array.from({ length: 1 + rand(10) }, () => rand(7)),
      1 + rand(3),
    ]);
    const halved: [number[], number][] = list.map(([f, n]) => [f, n / 2]); // not whole: the comparator's
    for (const max of [Infinity, 150]) {
      const whole = buildTree(flat(list), max);
      const half = buildTree(flat(halved), max);
      expect(Array.from(half.frame)).toEqual(Array.from(whole.frame));
      expect(Array.from(half.parent)).toEqual(Array.from(whole.parent));
      expect(Array.from(half.total)).toEqual(Array.from(whole.total, (v) => v / 2));
      expect(half.folded).toBe(whole.folded / 2);
    }
  });
});
