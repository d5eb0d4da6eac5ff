// SPDX-License-Identifier: Apache-2.0
// Parses and shapes a plan off the main thread: a whole hot set's body is ~15 MB of JSON (its listing,
// heatmaps and profile) and holds thousands of blocks and cells; the page gets back only its view.
import { parsePlanBody, shapePlan, type PlanView } from "./planModel";

export interface ShapeRequest {
  id: number;
  /** The plan's body as served (GET .../plans/{id}/body), UTF-8 JSON. */
  body: ArrayBuffer;
  estimated: boolean;
}
export type ShapeReply = { id: number; view: PlanView } | { id: number; error: string };

self.onmessage = (ev: MessageEvent<ShapeRequest>) => {
  const { id, body, estimated } = ev.data;
  try {
    (self as unknown as Worker).postMessage({
      id,
      view: shapePlan(parsePlanBody(body), estimated),
    } satisfies ShapeReply);
  } catch (e) {
    (self as unknown as Worker).postMessage({
      id,
      error: e instanceof Error ? e.message : String(e),
    } satisfies ShapeReply);
  }
};
