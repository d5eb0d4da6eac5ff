// SPDX-License-Identifier: Apache-2.0
// Flame graph work off the main thread, so a tree of a hundred thousand frames never blocks the page:
// "layout" lays out a tree already parsed (the differential graph's); "open" starts reading what the
// browser's storage kept of a host (flameStore.ts), as its view's samples are asked for; "stacks"
// parses a view's reply and answers with the stacks whose definitions it lacks ("missing"), then, once
// "definitions" brings them (or at once when none lack), keeps them and lays the view's tree out
// (flameLoad.ts), then saves them in the browser's storage; "drop" ends a view the page no longer
// waits for; "tree" parses a fleet group's answer (a tree the server built, fleetTree.ts) and lays it out. The stack cache lives as long as the worker. Layouts' typed arrays are posted back
// transferred, not copied.
import { layoutFlame, type FlameFrame, type FlameInput, type FlameLayout } from "./flameModel";
import { FlameLoad, KeptDefinitions, layoutBuffers, type LoadedFlame } from "./flameLoad";
import { StackCache } from "./flameStacks";
import { IdbStore } from "./flameStore";
import { readFleetTree, type FleetTreeSummary } from "./fleetTree";

export type FlameRequest =
  | { id: number; type: "layout"; input: FlameInput }
  | { id: number; type: "open"; hostId: string }
  | { id: number; type: "stacks"; hostId: string; body: ArrayBuffer }
  | { id: number; type: "definitions"; body: ArrayBuffer }
  | { id: number; type: "drop" }
  | { id: number; type: "tree"; body: ArrayBuffer };

export type FlameReply =
  | { id: number; type: "done"; layout: FlameLayout; ms: number }
  | { id: number; type: "missing"; ids: string[] }
  | { id: number; type: "loaded"; loaded: LoadedFlame }
  | { id: number; type: "tree"; layout: FlameLayout; frames: FlameFrame[]; summary: FleetTreeSummary; ms: number }
  | { id: number; type: "error"; message: string };

const kept = new KeptDefinitions(new StackCache(), typeof indexedDB === "undefined" ? null : new IdbStore(indexedDB));
const loads = new Map<number, { load: FlameLoad; asked: number }>();
/** Views whose reply is being read (what the storage kept of their host is awaited). */
const reading = new Set<number>();

self.onmessage = async (ev: MessageEvent<FlameRequest>) => {
  const req = ev.data;
  const post = (reply: FlameReply, transfer: ArrayBuffer[] = []) =>
    (self as unknown as Worker).postMessage(reply, transfer);
  const finish = (load: FlameLoad, defs: ArrayBuffer | null, asked: number) => {
    const loaded = load.finish(defs, asked);
    post({ id: req.id, type: "loaded", loaded }, layoutBuffers(loaded.layout));
    if (asked) void kept.save(load, defs);
  };
  try {
    if (req.type === "open") {
      kept.open(req.hostId);
    } else if (req.type === "stacks") {
      reading.add(req.id);
      const load = await kept.read(req.hostId, req.body);
      if (!reading.delete(req.id)) return; // dropped meanwhile
      const missing = load.missing();
      if (!missing.length) return finish(load, null, load.inlined);
      loads.set(req.id, { load, asked: missing.length });
      post({ id: req.id, type: "missing", ids: missing });
    } else if (req.type === "definitions") {
      const view = loads.get(req.id);
      loads.delete(req.id);
      if (view) finish(view.load, req.body, view.asked + view.load.inlined);
    } else if (req.type === "tree") {
      const t0 = performance.now();
      const { input, summary } = readFleetTree(req.body);
      const layout = layoutFlame(input);
      post(
        { id: req.id, type: "tree", layout, frames: input.frames, summary, ms: performance.now() - t0 },
        layoutBuffers(layout),
      );
    } else if (req.type === "drop") {
      loads.delete(req.id);
      reading.delete(req.id);
    } else {
      const t0 = performance.now();
      const layout = layoutFlame(req.input);
      post({ id: req.id, type: "done", layout, ms: performance.now() - t0 }, layoutBuffers(layout));
    }
  } catch (e) {
    loads.delete(req.id);
    reading.delete(req.id);
    post({ id: req.id, type: "error", message: e instanceof Error ? e.message : String(e) });
  }
};
