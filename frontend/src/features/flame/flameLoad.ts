// SPDX-License-Identifier: Apache-2.0
// The flame graph's replies read off the main thread. The view's reply (/flamegraph/stacks: each
// stack's samples by id) goes to the flame worker as bytes (transferred, not copied), which parses it
// and answers with the ids of the stacks it does not keep yet; their definitions (/flamegraph/definitions)
// go to it the same way, and it keeps them for the page's life (flameStacks.ts) and, where the browser
// has IndexedDB, for the next pages too (flameStore.ts), under the host and the reply's catalog key.
// The worker then merges the stacks' paths into the tree (flameTree.ts), lays it out, and posts back
// what the page shows: the reply without its stacks, the frames, the samples folded to bound the tree,
// and the layout's typed arrays (transferred). One worker serves the page's flame graphs, so its cache
// outlives a view; it is started, and reads what the browser kept of the host, as soon as the flame
// tab opens (`prepareFlame`), while the view's samples are asked for. Where no Worker exists (jsdom)
// the same work runs in the calling task, with a cache of its own.
import type { FlameStacksSource as FlameSource } from "../../api/queries";
import type { FlameDefinitionsData, FlameStacksData } from "../../api/types";
import { layoutFlame, type FlameFrame, type FlameLayout } from "./flameModel";
import { buildTree } from "./flameTree";
import { StackCache } from "./flameStacks";
import type { DefinitionStore } from "./flameStore";
import type { FlameReply, FlameRequest } from "./flame.worker";

/** The flame graph's reply without its stacks: what the page shows around the graph. */
export type FlameSummary = Omit<FlameStacksData, "stacks" | "catalog" | "definitions">;

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

/** Marked on the page when a view's tree comes back laid out (bench/flame times the parts of a view). */
export const LOADED_MARK = "hotpath:flame-loaded";

const decode = <T>(body: ArrayBuffer): T => JSON.parse(new TextDecoder().decode(body)) as T;

const scopeOf = (hostId: string, catalog: string) => `${hostId}\0${catalog}`;

/** One view being read: its reply parsed, the stacks to ask for, then the tree once they are kept. */
export class FlameLoad {
  readonly reply: FlameStacksData;
  /** What the view's definitions are kept under: the host and its catalog key. */
  readonly scope: string;
  private ms: number;

  constructor(
    private readonly cache: StackCache,
    readonly hostId: string,
    body: ArrayBuffer,
  ) {
    const t0 = performance.now();
    this.reply = decode<FlameStacksData>(body);
    this.scope = scopeOf(hostId, this.reply.catalog);
    this.ms = performance.now() - t0;
  }

  /** Stacks whose definitions came in the reply itself (asked for with definitions=true). */
  inlined = 0;

  /** Keep the definitions the reply carries, if it was asked for with them. */
  defineInline(): void {
    const defs = this.reply.definitions;
    if (!defs) return;
    const t0 = performance.now();
    this.cache.define(this.scope, defs);
    this.inlined = defs.stacks.id.length;
    this.ms += performance.now() - t0;
  }

  /** The ids of the view's stacks whose definitions must be asked for. */
  missing(): string[] {
    const t0 = performance.now();
    let ids = this.cache.missing(this.scope, this.reply.stacks.id);
    if (this.reply.definitions) {
      // Those the reply carried are as new as can be, even with a frame not named yet.
      const got = new Set(this.reply.definitions.stacks.id);
      ids = ids.filter((id) => !got.has(id));
    }
    this.ms += performance.now() - t0;
    return ids;
  }

  /** Keep the missing stacks' definitions (null: none were missing), merge the paths, lay them out;
   *  `asked`: how many stacks' definitions this view asked for. */
  finish(definitions: ArrayBuffer | null, asked: number): LoadedFlame {
    const t0 = performance.now();
    if (definitions) this.cache.define(this.scope, decode<FlameDefinitionsData>(definitions));
    const { stacks, catalog: _catalog, definitions: _definitions, ...summary } = this.reply;
    const { frames, paths } = this.cache.paths(this.scope, stacks);
    const tree = buildTree(paths);
    const layout = layoutFlame({ frames, frame: tree.frame, parent: tree.parent, total: tree.total, self: tree.self });
    const ms = this.ms + performance.now() - t0;
    return { summary, frames, layout, folded: tree.folded, asked, ms };
  }
}

/** The definitions a page keeps: in memory for its life (`cache`) and, given a store, across page loads.
 *  What the store kept of a host is read once per page, as soon as `open` is called, and defined under
 *  the catalog key it was kept under; a view of the host uses it only if that is the view's key (else
 *  the store's copy is dropped), since its stacks are looked up under the view's key. */
export class KeptDefinitions {
  /** Per host: the catalog key of what the store kept of it (null: nothing), once read and defined. */
  private readonly restoring = new Map<string, Promise<string | null>>();

  constructor(
    readonly cache = new StackCache(),
    private readonly store: DefinitionStore | null = null,
  ) {}

  /** Start reading what the store keeps of this host (a view of it is coming). */
  open(hostId: string): void {
    if (!this.store || this.restoring.has(hostId)) return;
    const restored = this.store.load(hostId).then((stored) => {
      if (!stored) return null;
      for (const b of stored.bodies)
        this.cache.define(scopeOf(hostId, stored.catalog), decode<FlameDefinitionsData>(b));
      return stored.catalog;
    });
    this.restoring.set(
      hostId,
      restored.catch(() => null), // a store that fails is a store that kept nothing
    );
  }

  /** A view's reply read, once what the store kept of its host is defined. */
  async read(hostId: string, body: ArrayBuffer): Promise<FlameLoad> {
    const load = new FlameLoad(this.cache, hostId, body);
    this.open(hostId);
    const restored = await this.restoring.get(hostId);
    if (restored != null && restored !== load.reply.catalog) {
      this.restoring.set(hostId, Promise.resolve(null));
      void this.store?.drop(hostId).catch(() => undefined);
    }
    load.defineInline();
    return load;
  }

  /** Keep the definitions the view asked for (a definitions reply, else those its reply carried) in the
   *  store too (after the view is drawn); a store that fails keeps nothing. */
  async save(load: FlameLoad, definitions: ArrayBuffer | null): Promise<void> {
    const inline = load.reply.definitions;
    for (const body of [inline && new TextEncoder().encode(JSON.stringify(inline)).buffer, definitions])
      if (body) await this.store?.save(load.hostId, load.reply.catalog, body).catch(() => undefined);
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

const inline = new KeptDefinitions();

async function loadInline(body: ArrayBuffer, src: FlameSource): Promise<LoadedFlame> {
  const load = await inline.read(src.hostId, body);
  const missing = load.missing();
  const defs = missing.length ? await src.definitions(missing, src.signal) : null;
  return load.finish(defs, missing.length || load.inlined);
}

// Which hosts this browser keeps definitions of, as the page's thread can tell at once (localStorage:
// the worker's IndexedDB is read only once the worker runs): a view of a host not listed asks for every
// stack's frames with its samples, one request instead of two. Only a hint: a host listed whose
// definitions the storage no longer keeps has them asked for apart, as missing ones always are.
const KEPT_HINT = "hotpath-flame-kept";
const KEPT_HOSTS = 256;

function keptHosts(): string[] {
  try {
    const v: unknown = JSON.parse(localStorage.getItem(KEPT_HINT) ?? "[]");
    return Array.isArray(v) ? v.filter((h): h is string => typeof h === "string") : [];
  } catch {
    return [];
  }
}

/** Whether this browser keeps (as far as the page can tell) the definitions of the host's stacks. */
export function keepsDefinitions(hostId: string): boolean {
  return typeof indexedDB !== "undefined" && typeof Worker !== "undefined" && keptHosts().includes(hostId);
}

function markKept(hostId: string): void {
  try {
    const hosts = [...keptHosts().filter((h) => h !== hostId), hostId].slice(-KEPT_HOSTS);
    localStorage.setItem(KEPT_HINT, JSON.stringify(hosts));
  } catch {
    // No storage: every view asks for the frames with its samples.
  }
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

/** A view of this host's flame graph is coming: start the page's flame worker and have it read what
 *  the browser kept of the host, while the view's samples are asked for. */
export function prepareFlame(hostId: string): void {
  if (typeof Worker === "undefined") inline.open(hostId);
  else flameWorker().postMessage({ id: 0, type: "open", hostId } satisfies FlameRequest);
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
      if (m.type === "loaded") {
        performance.mark(LOADED_MARK);
        if (m.loaded.asked > 0) markKept(src.hostId); // the worker saves what it was sent
        resolve(m.loaded);
      } else if (m.type === "error") reject(new Error(`the flame graph could not be read: ${m.message}`));
    });
    post({ id, type: "stacks", hostId: src.hostId, body }, [body]);
  });
}
