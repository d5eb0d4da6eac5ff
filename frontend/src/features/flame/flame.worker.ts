// SPDX-License-Identifier: Apache-2.0
// Lays a flame graph out off the main thread: receives the API's tree, posts back the layout's typed
// arrays (transferred, not copied), so a tree of a hundred thousand frames never blocks the page.
import { layoutFlame, type FlameInput, type FlameLayout } from "./flameModel";

export interface FlameRequest {
  id: number;
  input: FlameInput;
}

export type FlameReply = { id: number; type: "done"; layout: FlameLayout; ms: number } | { id: number; type: "error"; message: string };

self.onmessage = (ev: MessageEvent<FlameRequest>) => {
  const { id, input } = ev.data;
  const t0 = performance.now();
  try {
    const layout = layoutFlame(input);
    const buffers = [layout.frame, layout.parent, layout.depth, layout.end, layout.x0, layout.w, layout.total, layout.self,
      layout.delta, layout.bTotal, layout.bSelf].filter((a): a is NonNullable<typeof a> => a !== null).map((a) => a.buffer);
    (self as unknown as Worker).postMessage({ id, type: "done", layout, ms: performance.now() - t0 } satisfies FlameReply,
      buffers as ArrayBuffer[]);
  } catch (e) {
    (self as unknown as Worker).postMessage({ id, type: "error", message: e instanceof Error ? e.message : String(e) } satisfies FlameReply);
  }
};
