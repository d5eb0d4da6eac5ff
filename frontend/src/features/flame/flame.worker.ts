// SPDX-License-Identifier: Apache-2.0
// Flame graph work off the main thread, so a tree of a hundred thousand frames never blocks the page:
// "layout" lays out a tree already parsed (the differential graph's); "load" parses a flame graph reply's
// bytes and lays its tree out (flameLoad.ts). Layouts' typed arrays are posted back transferred, not copied.
import { layoutFlame, type FlameInput, type FlameLayout } from "./flameModel";
import { layoutBuffers, loadFlame, type LoadedFlame } from "./flameLoad";

export type FlameRequest =
  { id: number; type: "layout"; input: FlameInput } | { id: number; type: "load"; body: ArrayBuffer };

export type FlameReply =
  | { id: number; type: "done"; layout: FlameLayout; ms: number }
  | { id: number; type: "loaded"; loaded: LoadedFlame }
  | { id: number; type: "error"; message: string };

self.onmessage = (ev: MessageEvent<FlameRequest>) => {
  const req = ev.data;
  const post = (reply: FlameReply, transfer: ArrayBuffer[] = []) =>
    (self as unknown as Worker).postMessage(reply, transfer);
  try {
    if (req.type === "load") {
      const loaded = loadFlame(req.body);
      post({ id: req.id, type: "loaded", loaded }, layoutBuffers(loaded.layout));
    } else {
      const t0 = performance.now();
      const layout = layoutFlame(req.input);
      post({ id: req.id, type: "done", layout, ms: performance.now() - t0 }, layoutBuffers(layout));
    }
  } catch (e) {
    post({ id: req.id, type: "error", message: e instanceof Error ? e.message : String(e) });
  }
};
