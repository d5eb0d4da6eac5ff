// SPDX-License-Identifier: Apache-2.0
// The shaped plan, computed in a Web Worker (in a macrotask where no Worker exists, as in jsdom).
import { useEffect, useState } from "react";
import { shapePlan, type AgentPlan, type PlanView } from "./planModel";
import type { ShapeReply } from "./planModel.worker";

let nextId = 1;

export function usePlanView(plan: AgentPlan | null | undefined, estimated: boolean): { view: PlanView | null; error: string | null } {
  const [state, setState] = useState<{ view: PlanView | null; error: string | null }>({ view: null, error: null });
  useEffect(() => {
    if (!plan) {
      setState({ view: null, error: null });
      return;
    }
    if (typeof Worker === "undefined") {
      const t = setTimeout(() => setState({ view: shapePlan(plan, estimated), error: null }), 0);
      return () => clearTimeout(t);
    }
    const id = nextId++;
    const worker = new Worker(new URL("./planModel.worker.ts", import.meta.url), { type: "module" });
    worker.onmessage = (ev: MessageEvent<ShapeReply>) => {
      if (ev.data.id !== id) return;
      setState("view" in ev.data ? { view: ev.data.view, error: null } : { view: null, error: ev.data.error });
      worker.terminate();
    };
    worker.onerror = (e) => setState({ view: null, error: e.message || "the plan could not be shaped" });
    worker.postMessage({ id, plan, estimated });
    return () => worker.terminate();
  }, [plan, estimated]);
  return state;
}
