// SPDX-License-Identifier: Apache-2.0
import { describe, expect, it } from "vitest";
import { readFleetTree } from "./fleetTree";

const bytes = (v: unknown) => new TextEncoder().encode(JSON.stringify(v)).buffer;
const frames = [{ name: "vfs_read", module: "vmlinux", kind: "kernel", function_id: 2 }];

describe("a fleet group's tree", () => {
  it("reads a flame graph's tree and keeps the rest of the answer", () => {
    const { input, summary } = readFleetTree(
      bytes({ samples: 5, hosts: [], frames, nodes: { frame: [-1, 0], parent: [-1, 0], total: [5, 5], self: [0, 5] } }),
    );
    expect(input).toEqual({ frames, frame: [-1, 0], parent: [-1, 0], total: [5, 5], self: [0, 5] });
    expect(summary).toEqual({ samples: 5, hosts: [] });
  });

  it("reads a comparison's tree with both sides", () => {
    const nodes = { frame: [-1, 0], parent: [-1, 0], a_total: [3, 3], b_total: [4, 4], a_self: [0, 3], b_self: [0, 4] };
    const { input, summary } = readFleetTree(bytes({ a_samples: 3, b_samples: 4, frames, nodes }));
    expect(input).toEqual({
      frames,
      frame: [-1, 0],
      parent: [-1, 0],
      total: [3, 3],
      self: [0, 3],
      bTotal: [4, 4],
      bSelf: [0, 4],
    });
    expect(summary).toEqual({ a_samples: 3, b_samples: 4 });
  });
});
