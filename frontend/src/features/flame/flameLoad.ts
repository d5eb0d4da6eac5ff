// SPDX-License-Identifier: Apache-2.0
// The flame graph's reply read off the main thread: the reply's bytes go to a worker (transferred, not
// copied), which parses the JSON (megabytes for an hour), merges the range's distinct paths into the tree
// (flameTree.ts) and lays it out, and posts back what the page shows: the reply without its paths, the
// frames, the samples folded to bound the tree, and the layout's typed arrays (transferred). Where no
// Worker exists (jsdom) the same work runs in the calling task.
import type { FlameGraphData } from "../../api/types";
import { layoutFlame, type FlameFrame, type FlameLayout } from "./flameModel";
import { buildTree } from "./flameTree";
import type { FlameReply, FlameRequest } from "./flame.worker";

/** The flame graph's reply without its paths: what the page shows around the graph. */
export type FlameSummary = Omit<FlameGraphData, "frames" | "paths">;

export interface LoadedFlame {
  summary: FlameSummary;
  frames: FlameFrame[];
  layout: FlameLayout;
  /** Samples of the nodes folded into their parents to bound the tree's size. */
  folded: number;
  /** Time to parse, build the tree and lay it out, in the worker. */
  ms: number;
}

/** Parse a flame graph reply (UTF-8 JSON), merge its paths into the tree and lay it out. */
export function loadFlame(body: ArrayBuffer): LoadedFlame {
  const t0 = performance.now();
  const d = JSON.parse(new TextDecoder().decode(body)) as FlameGraphData;
  const { frames, paths, ...summary } = d;
  const tree = buildTree(paths);
  const layout = layoutFlame({ frames, frame: tree.frame, parent: tree.parent, total: tree.total, self: tree.self });
  return { summary, frames, layout, folded: tree.folded, ms: performance.now() - t0 };
}

/** The typed arrays of a layout, to transfer rather than copy. */
export function layoutBuffers(layout: FlameLayout): ArrayBuffer[] {
  return [
    layout.frame,
    layout.parent,
    layout.depth,
    layout.end,
    layout.x0,
    layout.w,
    layout.total,
    layout.self,
    layout.delta,
    layout.bTotal,
    layout.bSelf,
  ]
    .filter((a): a is NonNullable<typeof a> => a !== null)
    .map((a) => a.buffer as ArrayBuffer);
}

let nextId = 1;

/** loadFlame in a worker of its own (ended when it answers or `signal` aborts). */
export function loadFlameInWorker(body: ArrayBuffer, signal?: AbortSignal): Promise<LoadedFlame> {
  if (typeof Worker === "undefined") return Promise.resolve(loadFlame(body));
  return new Promise((resolve, reject) => {
    const id = nextId++;
    const worker = new Worker(new URL("./flame.worker.ts", import.meta.url), { type: "module" });
    const stop = () => {
      worker.terminate();
      reject(new Error("aborted"));
    };
    signal?.addEventListener("abort", stop, { once: true });
    const finish = () => {
      signal?.removeEventListener("abort", stop);
      worker.terminate();
    };
    worker.onmessage = (ev: MessageEvent<FlameReply>) => {
      const m = ev.data;
      if (m.id !== id) return;
      finish();
      if (m.type === "loaded") resolve(m.loaded);
      else if (m.type === "error") reject(new Error(`the flame graph could not be read: ${m.message}`));
    };
    worker.onerror = (ev) => {
      finish();
      reject(new Error(ev.message || "the flame graph worker failed"));
    };
    worker.postMessage({ id, type: "load", body } satisfies FlameRequest, [body]);
  });
}
