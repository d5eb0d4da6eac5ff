// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import {
  diffColour,
  findPath,
  frameColour,
  isAncestorOrSelf,
  layoutFlame,
  matcher,
  pathOf,
  search,
  visibleCells,
  type FlameFrame,
  type FlameInput,
} from "./flameModel";

const frames: FlameFrame[] = [
  { name: "entry_SYSCALL_64", module: "vmlinux", kind: "kernel", function_id: 1 },
  { name: "ksys_read", module: "vmlinux", kind: "kernel", function_id: 2 },
  { name: "vfs_read", module: "vmlinux", kind: "kernel", function_id: 3 },
  { name: "do_sys_open", module: "vmlinux", kind: "kernel", function_id: 4 },
  { name: "libc.so.6+0x11a2b", module: "/usr/lib/libc.so.6", kind: "user", function_id: null },
  { name: "0xffffffff8378da21", module: "[kernel]", kind: "kernel_address", function_id: null },
];

// root(100) → entry(90) → ksys_read(60) → vfs_read(40, self 40)
//                        → do_sys_open(30, self 30)       ksys_read self 20
//          → libc(10, self 10)
function tree(): FlameInput {
  return {
    frames,
    frame: [-1, 0, 1, 2, 3, 4],
    parent: [-1, 0, 1, 2, 1, 0],
    total: [100, 90, 60, 40, 30, 10],
    self: [0, 0, 20, 40, 30, 10],
  };
}

describe("layoutFlame", () => {
  it("lays children side by side inside their parent, as fractions of the root", () => {
    const l = layoutFlame(tree());
    expect(Array.from(l.depth)).toEqual([0, 1, 2, 3, 2, 1]);
    expect(Array.from(l.w)).toEqual([1, 0.9, 0.6, 0.4, 0.3, 0.1]);
    expect(Array.from(l.x0).map((x) => Math.round(x * 100) / 100)).toEqual([0, 0, 0, 0, 0.6, 0.9]);
    expect(Array.from(l.end)).toEqual([6, 5, 4, 4, 5, 6]);
    expect(l.maxDepth).toBe(3);
    expect(isAncestorOrSelf(l, 1, 3)).toBe(true);
    expect(isAncestorOrSelf(l, 2, 4)).toBe(false);
  });

  it("handles an empty tree and a root without samples", () => {
    expect(layoutFlame({ frames, frame: [], parent: [], total: [], self: [] }).n).toBe(0);
    const l = layoutFlame({ frames, frame: [-1], parent: [-1], total: [0], self: [0] });
    expect(l.w[0]).toBe(1);
    expect(visibleCells(l, 0, 800)).toHaveLength(1);
  });

  it("gives a differential graph the average share as width and B − A as change", () => {
    const t = { ...tree(), bTotal: [200, 180, 60, 20, 120, 20], bSelf: [0, 0, 40, 20, 120, 20] };
    const l = layoutFlame(t);
    // do_sys_open: 30 % of A, 60 % of B → width 45 %, change +30 points.
    expect(l.w[4]).toBeCloseTo(0.45);
    expect(l.delta![4]).toBeCloseTo(0.3);
    expect(l.delta![3]).toBeCloseTo(-0.3);
    const colour = diffColour(l);
    expect(colour(4)).not.toBe(colour(3));
    expect(colour(4)).toMatch(/^rgb\(\d+, \d+, \d+\)$/);
    // Red for growth: more red than blue.
    const [r, , b] = colour(4).match(/\d+/g)!.map(Number);
    expect(r).toBeGreaterThan(b);
    // A frame only in B is still visible.
    const onlyB = layoutFlame({
      frames,
      frame: [-1, 0],
      parent: [-1, 0],
      total: [10, 0],
      self: [10, 0],
      bTotal: [10, 10],
      bSelf: [0, 10],
    });
    expect(onlyB.w[1]).toBeCloseTo(0.5);
  });
});

describe("visibleCells", () => {
  it("zooms into a node: its ancestors span the width, its subtree fills it", () => {
    const l = layoutFlame(tree());
    const cells = visibleCells(l, 2, 1000);
    expect(cells.map((c) => c.node)).toEqual([0, 1, 2, 3]);
    expect(cells[0].width).toBe(1000);
    expect(cells[2]).toMatchObject({ node: 2, x: 0, width: 1000, depth: 2 });
    expect(cells[3].width).toBeCloseTo((1000 * 40) / 60);
    // Siblings of the focus are not drawn.
    expect(cells.some((c) => c.node === 4 || c.node === 5)).toBe(false);
  });

  it("leaves out cells narrower than the minimum, with their subtrees", () => {
    const l = layoutFlame(tree());
    const cells = visibleCells(l, 0, 100, 15);
    expect(cells.map((c) => c.node)).toEqual([0, 1, 2, 3, 4]); // libc is 10 px wide
    expect(visibleCells(l, 0, 100, 50).map((c) => c.node)).toEqual([0, 1, 2]);
  });

  it("scales to a hundred thousand nodes", () => {
    // A pre-order tree: 999 children of the root with 100 one-sample leaves each.
    const pre = { frames, frame: [-1], parent: [-1], total: [999 * 100], self: [0] } satisfies FlameInput;
    for (let k = 0; k < 999; k++) {
      const p = pre.frame.length;
      pre.frame.push(k % 5);
      pre.parent.push(0);
      pre.total.push(100);
      pre.self.push(0);
      for (let j = 0; j < 100; j++) {
        pre.frame.push((k + j) % 5);
        pre.parent.push(p);
        pre.total.push(1);
        pre.self.push(1);
      }
    }
    const t0 = performance.now();
    const l = layoutFlame(pre);
    const cells = visibleCells(l, 0, 1200);
    const ms = performance.now() - t0;
    expect(l.n).toBe(1 + 999 * 101);
    expect(cells.length).toBeLessThan(l.n); // 1-sample cells are under half a pixel
    expect(ms).toBeLessThan(2000); // generous: a loaded CI machine; the real figure is a few ms
  });
});

describe("search", () => {
  it("matches substrings and regular expressions, counting nested matches once", () => {
    const l = layoutFlame(tree());
    const r = search(l, frames, "read")!;
    expect(Array.from(r.matches)).toEqual([0, 0, 1, 1, 0, 0]);
    expect(r.count).toBe(2);
    expect(r.samples).toBe(60); // vfs_read lies inside ksys_read
    expect(r.share).toBeCloseTo(0.6);
    expect(search(l, frames, "/^do_|libc/")!.samples).toBe(40);
    expect(search(l, frames, "  ")).toBeNull();
    expect(matcher("/(/")).toBeNull();
    expect(matcher("VFS")!("vfs_read")).toBe(true);
  });
});

describe("paths", () => {
  it("names a node by the frames from the root and finds it again", () => {
    const l = layoutFlame(tree());
    expect(pathOf(l, frames, 3)).toBe("entry_SYSCALL_64;ksys_read;vfs_read");
    expect(findPath(l, frames, "entry_SYSCALL_64;ksys_read;vfs_read")).toBe(3);
    expect(findPath(l, frames, "entry_SYSCALL_64;do_sys_open")).toBe(4);
    // A path that no longer exists goes as deep as it can.
    expect(findPath(l, frames, "entry_SYSCALL_64;nothing")).toBe(1);
    expect(findPath(l, frames, "")).toBe(0);
  });
});

describe("colours", () => {
  it("are stable per name and tell kernel, user and unknown code apart", () => {
    expect(frameColour(frames[2])).toBe(frameColour({ ...frames[2] }));
    expect(frameColour(frames[2])).toMatch(/^hsl\((\d+), /);
    const hue = (c: string) => Number(/^hsl\((\d+)/.exec(c)![1]);
    expect(hue(frameColour(frames[2]))).toBeLessThan(60);
    expect(hue(frameColour(frames[4]))).toBeGreaterThan(90);
    expect(frameColour(frames[5])).toMatch(/^hsl\(210, 8%/);
  });
});
