// SPDX-License-Identifier: Apache-2.0
// Shapes a plan off the main thread (a plan of a large group holds thousands of blocks and cells).
import { shapePlan, type AgentPlan, type PlanView } from "./planModel";

export interface ShapeRequest {
  id: number;
  plan: AgentPlan;
  estimated: boolean;
}
export type ShapeReply = { id: number; view: PlanView } | { id: number; error: string };

self.onmessage = (ev: MessageEvent<ShapeRequest>) => {
  const { id, plan, estimated } = ev.data;
  try {
    (self as unknown as Worker).postMessage({ id, view: shapePlan(plan, estimated) } satisfies ShapeReply);
  } catch (e) {
    (self as unknown as Worker).postMessage({
      id,
      error: e instanceof Error ? e.message : String(e),
    } satisfies ShapeReply);
  }
};
