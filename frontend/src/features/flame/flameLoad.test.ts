// SPDX-License-Identifier: Apache-2.0
import { describe, expect, it } from "vitest";
import type { FlameGraphData } from "../../api/types";
import { layoutBuffers, loadFlame, loadFlameInWorker } from "./flameLoad";
import { layoutFlame } from "./flameModel";

const reply: FlameGraphData = {
  from: "2026-01-01T00:00:00Z",
  to: "2026-01-01T01:00:00Z",
  seconds: 3600,
  filter: { pid: null, comm: null, cpu: null, idle: "exclude" },
  samples: 110,
  undefined_samples: 10,
  frames: [
    { name: "entry_SYSCALL_64", module: "vmlinux", kind: "kernel", function_id: 1 },
    { name: "vfs_read", module: "vmlinux", kind: "kernel", function_id: 2 },
  ],
  // entry → vfs_read (40 samples), entry alone (60)
  paths: { frame: [0, 1, 0], length: [2, 1], samples: [40, 60] },
  contexts: {
    processes: [{ pid: 7, comm: "cat", samples: 110 }],
    commands: [{ comm: "cat", samples: 110 }],
    cpus: [{ cpu: 0, samples: 110 }],
    all_samples: 120,
    idle_samples: 10,
  },
} as unknown as FlameGraphData;

const bytes = () => new TextEncoder().encode(JSON.stringify(reply)).buffer;

describe("loadFlame", () => {
  it("parses a reply's bytes into the reply without its paths, its frames and the layout of the paths' tree", () => {
    const loaded = loadFlame(bytes());
    const { frames, paths: _paths, ...summary } = reply;
    expect(loaded.summary).toEqual(summary);
    expect(loaded.frames).toEqual(frames);
    const want = layoutFlame({
      frames,
      frame: [-1, 0, 1],
      parent: [-1, 0, 1],
      total: [100, 100, 40],
      self: [0, 60, 40],
    });
    expect(loaded.layout).toEqual(want);
    expect(loaded.folded).toBe(0);
    expect(loaded.ms).toBeGreaterThanOrEqual(0);
  });

  it("names every typed array of a layout for transfer, once each", () => {
    const l = loadFlame(bytes()).layout;
    const buffers = layoutBuffers(l);
    expect(buffers).toHaveLength(8); // not a differential graph: no delta, bTotal, bSelf
    expect(new Set(buffers).size).toBe(buffers.length);
  });

  it("reads in the calling task where there is no Worker (jsdom)", async () => {
    expect(typeof Worker).toBe("undefined");
    const loaded = await loadFlameInWorker(bytes());
    expect(loaded.layout.n).toBe(3);
    expect(loaded.summary.samples).toBe(110);
  });
});
