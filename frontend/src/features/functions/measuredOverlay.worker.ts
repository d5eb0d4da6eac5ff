// SPDX-License-Identifier: Apache-2.0
// Shapes a measurement's counts for the CFG overlay off the main thread (a kernel function may have
// hundreds of blocks and edges; the page never waits on it).
import { shapeOverlay, type MeasuredOverlay, type OverlayGraph } from "./measuredOverlay";
import type { MeasurementCfg } from "../../api/types";

export interface OverlayRequest {
  id: number;
  graph: OverlayGraph;
  cfg: MeasurementCfg;
}

export interface OverlayReply {
  id: number;
  overlay: MeasuredOverlay;
}

self.onmessage = (ev: MessageEvent<OverlayRequest>) => {
  const { id, graph, cfg } = ev.data;
  (self as unknown as Worker).postMessage({ id, overlay: shapeOverlay(graph, cfg) } satisfies OverlayReply);
};
