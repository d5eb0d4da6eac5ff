// SPDX-License-Identifier: Apache-2.0
// The shaped plan, computed in a Web Worker (shared/useWorker.ts; in a macrotask where no Worker exists,
// as in jsdom).
import { useEffect, useMemo, useState } from "react";
import { useWorker, type WorkerJob } from "../../shared/useWorker";
import { shapePlan, type AgentPlan, type PlanView } from "./planModel";
import type { ShapeReply, ShapeRequest } from "./planModel.worker";

const startWorker = () => new Worker(new URL("./planModel.worker.ts", import.meta.url), { type: "module" });

export function usePlanView(
  plan: AgentPlan | null | undefined,
  estimated: boolean,
): { view: PlanView | null; error: string | null } {
  const [state, setState] = useState<{ view: PlanView | null; error: string | null }>({ view: null, error: null });
  useEffect(() => {
    if (!plan) setState({ view: null, error: null });
  }, [plan, estimated]);
  const job = useMemo(
    (): WorkerJob<Omit<ShapeRequest, "id">, ShapeReply> | null =>
      plan
        ? {
            request: { plan, estimated },
            inline: () => setState({ view: shapePlan(plan, estimated), error: null }),
            onReply: (reply) => {
              setState("view" in reply ? { view: reply.view, error: null } : { view: null, error: reply.error });
              return true;
            },
            onError: (message) => setState({ view: null, error: message || "the plan could not be shaped" }),
          }
        : null,
    [plan, estimated],
  );
  useWorker(startWorker, job);
  return state;
}
