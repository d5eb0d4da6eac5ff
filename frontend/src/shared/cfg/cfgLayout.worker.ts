// SPDX-License-Identifier: Apache-2.0
// Lays out a CFG off the main thread: receives the model, posts progress while it works and the
// positions and edge routes at the end (ids only, so the message stays small).
import { layeredLayout, type LayoutEdgeIn, type LayoutNodeIn } from "./cfgLayout";

export interface LayoutRequest {
  id: number;
  nodes: LayoutNodeIn[];
  edges: LayoutEdgeIn[];
  entry: string | undefined;
}

export type LayoutReply =
  | { id: number; type: "progress"; phase: string; fraction: number }
  | {
      id: number;
      type: "done";
      width: number;
      height: number;
      positions: [string, { x: number; y: number }][];
      routes: [string, { x: number; y: number }[]][];
      ms: number;
    }
  | { id: number; type: "error"; message: string };

self.onmessage = (ev: MessageEvent<LayoutRequest>) => {
  const { id, nodes, edges, entry } = ev.data;
  const post = (m: LayoutReply) => (self as unknown as Worker).postMessage(m);
  const t0 = performance.now();
  try {
    const r = layeredLayout(nodes, edges, entry, {}, (phase, fraction) =>
      post({ id, type: "progress", phase, fraction }),
    );
    post({
      id,
      type: "done",
      width: r.width,
      height: r.height,
      positions: [...r.positions],
      routes: [...r.routes],
      ms: performance.now() - t0,
    });
  } catch (e) {
    post({ id, type: "error", message: e instanceof Error ? e.message : String(e) });
  }
};
