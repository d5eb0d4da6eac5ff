// SPDX-License-Identifier: Apache-2.0
// The flame graph's replies read off the main thread. The view's reply (/flamegraph/stacks: each
// stack's samples by id) goes to the flame worker as bytes (transferred, not copied), which parses it
// and answers with the ids of the stacks it does not keep yet; their definitions (/flamegraph/definitions)
// go to it the same way, and it keeps them for the page's life (flameStacks.ts). The worker then merges
// the stacks' paths into the tree (flameTree.ts), lays it out, and posts back what the page shows: the
// reply without its stacks, the frames, the samples folded to bound the tree, and the layout's typed
// arrays (transferred). One worker serves the page's flame graphs, so its cache outlives a view. Where
// no Worker exists (jsdom) the same work runs in the calling task, with a cache of its own.
import type { FlameStacksSource as FlameSource } from "../../api/queries";
import type { FlameDefinitionsData, FlameStacksData } from "../../api/types";
import { layoutFlame, type FlameFrame, type FlameLayout } from "./flameModel";
import { buildTree } from "./flameTree";
import { StackCache } from "./flameStacks";
import type { FlameReply, FlameRequest } from "./flame.worker";

/** The flame graph's reply without its stacks: what the page shows around the graph. */
export type FlameSummary = Omit<FlameStacksData, "stacks">;

export interface LoadedFlame {
  summary: FlameSummary;
  frames: FlameFrame[];
  layout: FlameLayout;
  /** Samples of the nodes folded into their parents to bound the tree's size. */
  folded: number;
  /** Stacks whose definitions this view asked for (0: all were kept from earlier views). */
  asked: number;
  /** Time to parse, build the tree and lay it out, in the worker (without the definitions' request). */
  ms: number;
}

const decode = <T>(body: ArrayBuffer): T => JSON.parse(new TextDecoder().decode(body)) as T;

/** One view being read: its reply parsed, the stacks to ask for, then the tree once they are kept. */
export class FlameLoad {
  readonly reply: FlameStacksData;
  readonly missing: string[];
  private ms: number;

  constructor(
    private readonly cache: StackCache,
    private readonly hostId: string,
    body: ArrayBuffer,
  ) {
    const t0 = performance.now();
    this.reply = decode<FlameStacksData>(body);
    this.missing = cache.missing(hostId, this.reply.stacks.id);
    this.ms = performance.now() - t0;
  }

  /** Keep the missing stacks' definitions (null: none were missing), merge the paths, lay them out. */
  finish(definitions: ArrayBuffer | null): LoadedFlame {
    const t0 = performance.now();
    if (definitions) this.cache.define(this.hostId, decode<FlameDefinitionsData>(definitions));
    const { stacks, ...summary } = this.reply;
    const { frames, paths } = this.cache.paths(this.hostId, stacks);
    const tree = buildTree(paths);
    const layout = layoutFlame({ frames, frame: tree.frame, parent: tree.parent, total: tree.total, self: tree.self });
    const ms = this.ms + performance.now() - t0;
    return { summary, frames, layout, folded: tree.folded, asked: this.missing.length, ms };
  }
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

const inlineCache = new StackCache();

async function loadInline(body: ArrayBuffer, src: FlameSource): Promise<LoadedFlame> {
  const load = new FlameLoad(inlineCache, src.hostId, body);
  const defs = load.missing.length ? await src.definitions(load.missing, src.signal) : null;
  return load.finish(defs);
}

let worker: Worker | null = null;
const waiting = new Map<number, (m: FlameReply) => void>();
let nextId = 1;

/** The page's flame worker, started on first use and kept (its stack cache with it). */
function flameWorker(): Worker {
  if (worker) return worker;
  const w = new Worker(new URL("./flame.worker.ts", import.meta.url), { type: "module" });
  w.onmessage = (ev: MessageEvent<FlameReply>) => waiting.get(ev.data.id)?.(ev.data);
  w.onerror = (ev) => {
    // The worker is gone with its cache: every view waiting on it fails, the next one starts another.
    for (const [id, answer] of waiting)
      answer({ id, type: "error", message: ev.message || "the flame graph worker failed" });
    waiting.clear();
    w.terminate();
    worker = null;
  };
  worker = w;
  return w;
}

/** A view's reply (/flamegraph/stacks bytes) read in the page's flame worker, asking `src` for the
 *  definitions it does not keep; where no Worker exists, in the calling task. */
export function loadFlameInWorker(body: ArrayBuffer, src: FlameSource): Promise<LoadedFlame> {
  if (typeof Worker === "undefined") return loadInline(body, src);
  const w = flameWorker();
  const id = nextId++;
  const post = (req: FlameRequest, transfer: ArrayBuffer[] = []) => w.postMessage(req, transfer);
  return new Promise<LoadedFlame>((resolve, reject) => {
    const done = () => {
      waiting.delete(id);
      src.signal?.removeEventListener("abort", abort);
    };
    const abort = () => {
      done();
      post({ id, type: "drop" });
      reject(new Error("aborted"));
    };
    src.signal?.addEventListener("abort", abort, { once: true });
    waiting.set(id, (m) => {
      if (m.type === "missing") {
        src.definitions(m.ids, src.signal).then(
          (defs) => post({ id, type: "definitions", body: defs }, [defs]),
          (e: unknown) => {
            done();
            post({ id, type: "drop" });
            reject(e instanceof Error ? e : new Error(String(e)));
          },
        );
        return;
      }
      done();
      if (m.type === "loaded") resolve(m.loaded);
      else if (m.type === "error") reject(new Error(`the flame graph could not be read: ${m.message}`));
    });
    post({ id, type: "stacks", hostId: src.hostId, body }, [body]);
  });
}
