// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import type { FlameDefinitionsData } from "../../api/types";
import { StackCache } from "./flameStacks";

const read = { name: "vfs_read", module: "vmlinux", kind: "kernel", function_id: 2 } as const;
const unnamed = { name: "vmlinux#7", module: "vmlinux", kind: "kernel", function_id: null } as const;
const libc = { name: "libc.so.6", module: "/usr/lib/libc.so.6", kind: "user", function_id: null } as const;

const defs = (frames: FlameDefinitionsData["frames"], id: string[], length: number[], frame: number[]) => ({
  frames,
  stacks: { id, length, frame },
});

describe("StackCache", () => {
  it("keeps stacks per host and merges frames of several replies by what they are", () => {
    const c = new StackCache();
    expect(c.missing("h1", ["a", "b"])).toEqual(["a", "b"]);
    c.define("h1", defs([libc, read], ["a"], [2], [0, 1]));
    c.define("h1", defs([read], ["b"], [1], [0]));
    expect(c.missing("h1", ["a", "b", "c"])).toEqual(["c"]);
    expect(c.missing("h2", ["a"])).toEqual(["a"]);
    const { frames, paths } = c.paths("h1", { id: ["b", "a", "c"], samples: [5, 7, 9] });
    expect(frames).toEqual([read, libc]);
    // c has no definition: left out.
    expect(paths).toEqual({ frame: [0, 1, 0], length: [1, 2], samples: [5, 7] });
  });

  it("uses a stack with a kernel frame not named yet, and asks for it again", () => {
    const c = new StackCache();
    c.define("h1", defs([libc, unnamed], ["a"], [2], [0, 1]));
    expect(c.paths("h1", { id: ["a"], samples: [3] }).frames).toEqual([libc, unnamed]);
    expect(c.missing("h1", ["a"])).toEqual(["a"]);
    c.define("h1", defs([libc, read], ["a"], [2], [0, 1]));
    expect(c.missing("h1", ["a"])).toEqual([]);
    expect(c.paths("h1", { id: ["a"], samples: [3] }).frames).toEqual([libc, read]);
  });

  it("starts again once it holds more stacks than its limit", () => {
    const c = new StackCache(1);
    c.define("h1", defs([read], ["a", "b"], [1, 1], [0, 0]));
    expect(c.size).toBe(2);
    expect(c.missing("h1", ["a"])).toEqual(["a"]);
    expect(c.size).toBe(0);
  });
});
