// SPDX-License-Identifier: Apache-2.0
// Flame graph work off the main thread, so a tree of a hundred thousand frames never blocks the page:
// "layout" lays out a tree already parsed (the differential graph's); "stacks" parses a view's reply
// and answers with the stacks whose definitions it lacks ("missing"), then, once "definitions" brings
// them (or at once when none lack), keeps them and lays the view's tree out (flameLoad.ts); "drop" ends
// a view the page no longer waits for. The stack cache lives as long as the worker. Layouts' typed
// arrays are posted back transferred, not copied.
import { layoutFlame, type FlameInput, type FlameLayout } from "./flameModel";
import { FlameLoad, layoutBuffers, type LoadedFlame } from "./flameLoad";
import { StackCache } from "./flameStacks";

export type FlameRequest =
  | { id: number; type: "layout"; input: FlameInput }
  | { id: number; type: "stacks"; hostId: string; body: ArrayBuffer }
  | { id: number; type: "definitions"; body: ArrayBuffer }
  | { id: number; type: "drop" };

export type FlameReply =
  | { id: number; type: "done"; layout: FlameLayout; ms: number }
  | { id: number; type: "missing"; ids: string[] }
  | { id: number; type: "loaded"; loaded: LoadedFlame }
  | { id: number; type: "error"; message: string };

const cache = new StackCache();
const loads = new Map<number, FlameLoad>();

self.onmessage = (ev: MessageEvent<FlameRequest>) => {
  const req = ev.data;
  const post = (reply: FlameReply, transfer: ArrayBuffer[] = []) =>
    (self as unknown as Worker).postMessage(reply, transfer);
  const finish = (load: FlameLoad, defs: ArrayBuffer | null) => {
    const loaded = load.finish(defs);
    post({ id: req.id, type: "loaded", loaded }, layoutBuffers(loaded.layout));
  };
  try {
    if (req.type === "stacks") {
      const load = new FlameLoad(cache, req.hostId, req.body);
      if (!load.missing.length) return finish(load, null);
      loads.set(req.id, load);
      post({ id: req.id, type: "missing", ids: load.missing });
    } else if (req.type === "definitions") {
      const load = loads.get(req.id);
      loads.delete(req.id);
      if (load) finish(load, req.body);
    } else if (req.type === "drop") {
      loads.delete(req.id);
    } else {
      const t0 = performance.now();
      const layout = layoutFlame(req.input);
      post({ id: req.id, type: "done", layout, ms: performance.now() - t0 }, layoutBuffers(layout));
    }
  } catch (e) {
    loads.delete(req.id);
    post({ id: req.id, type: "error", message: e instanceof Error ? e.message : String(e) });
  }
};
