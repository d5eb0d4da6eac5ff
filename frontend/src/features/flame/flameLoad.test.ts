// SPDX-License-Identifier: Apache-2.0
import { describe, expect, it } from "vitest";
import type { FlameDefinitionsData, FlameStacksData } from "../../api/types";
import { FlameLoad, layoutBuffers, loadFlameInWorker } from "./flameLoad";
import { layoutFlame } from "./flameModel";
import { StackCache } from "./flameStacks";

const reply: FlameStacksData = {
  from: "2026-01-01T00:00:00Z",
  to: "2026-01-01T01:00:00Z",
  seconds: 3600,
  filter: { pid: null, comm: null, cpu: null, idle: "exclude" },
  samples: 110,
  undefined_samples: 10,
  // entry → vfs_read (40 samples), entry alone (60)
  stacks: { id: ["00000000000000a1", "00000000000000b2"], samples: [40, 60] },
  contexts: {
    processes: [{ pid: 7, comm: "cat", samples: 110 }],
    commands: [{ comm: "cat", samples: 110 }],
    cpus: [{ cpu: 0, samples: 110 }],
    all_samples: 120,
    idle_samples: 10,
  },
  catalog: "00000000000000c1",
};

const frames: FlameDefinitionsData["frames"] = [
  { name: "entry_SYSCALL_64", module: "vmlinux", kind: "kernel", function_id: 1 },
  { name: "vfs_read", module: "vmlinux", kind: "kernel", function_id: 2 },
];
// The definitions reply numbers frames its own way: vfs_read first here.
const definitions: FlameDefinitionsData = {
  frames: [frames[1], frames[0]],
  stacks: { id: ["00000000000000b2", "00000000000000a1"], length: [1, 2], frame: [1, 1, 0] },
};

const encode = (v: unknown) => new TextEncoder().encode(JSON.stringify(v)).buffer;

function load(cache: StackCache) {
  const l = new FlameLoad(cache, "h1", encode(reply));
  const missing = l.missing();
  return { missing, loaded: l.finish(missing.length ? encode(definitions) : null, missing.length) };
}

const want = () =>
  layoutFlame({ frames, frame: [-1, 0, 1], parent: [-1, 0, 1], total: [100, 100, 40], self: [0, 60, 40] });

describe("FlameLoad", () => {
  it("parses a reply's bytes, asks for its stacks' definitions and lays out their paths' tree", () => {
    const { missing, loaded } = load(new StackCache());
    expect(missing).toEqual(reply.stacks.id);
    const { stacks: _stacks, catalog: _catalog, ...summary } = reply;
    expect(loaded.summary).toEqual(summary);
    expect(loaded.frames).toEqual(frames);
    expect(loaded.layout).toEqual(want());
    expect(loaded.folded).toBe(0);
    expect(loaded.asked).toBe(2);
    expect(loaded.ms).toBeGreaterThanOrEqual(0);
  });

  it("gives a second view with the definitions kept the same tree without asking for any", () => {
    const cache = new StackCache();
    const first = load(cache).loaded;
    const { missing, loaded } = load(cache);
    expect(missing).toEqual([]);
    expect(loaded.asked).toBe(0);
    expect(loaded.frames).toEqual(first.frames);
    expect(loaded.layout).toEqual(first.layout);
    expect(loaded.layout).toEqual(want());
  });

  it("keeps the definitions a reply carries (asked with definitions=true): asks for none, the same tree", () => {
    const l = new FlameLoad(new StackCache(), "h1", encode({ ...reply, definitions }));
    l.defineInline();
    expect(l.missing()).toEqual([]);
    const loaded = l.finish(null, l.inlined);
    expect(loaded.asked).toBe(2);
    expect(loaded.layout).toEqual(want());
    expect(loaded.summary).not.toHaveProperty("definitions");
  });

  it("names every typed array of a layout for transfer, once each", () => {
    const l = load(new StackCache()).loaded.layout;
    const buffers = layoutBuffers(l);
    expect(buffers).toHaveLength(8); // not a differential graph: no delta, bTotal, bSelf
    expect(new Set(buffers).size).toBe(buffers.length);
  });

  it("reads in the calling task where there is no Worker (jsdom), asking for definitions once", async () => {
    expect(typeof Worker).toBe("undefined");
    const asked: string[][] = [];
    const src = {
      hostId: "inline-host",
      definitions: (ids: string[]) => {
        asked.push(ids);
        return Promise.resolve(encode(definitions));
      },
      signal: new AbortController().signal,
    };
    const loaded = await loadFlameInWorker(encode(reply), src);
    expect(loaded.layout.n).toBe(3);
    expect(loaded.summary.samples).toBe(110);
    const again = await loadFlameInWorker(encode(reply), src);
    expect(asked).toEqual([reply.stacks.id]);
    expect(again.layout).toEqual(loaded.layout);
  });
});
