// SPDX-License-Identifier: Apache-2.0
// The shaped plan, parsed from its body's bytes and shaped in a Web Worker (shared/useWorker.ts; in a
// macrotask where no Worker exists, as in jsdom): the main thread never parses a large plan.
import { useEffect, useMemo, useState } from "react";
import { useWorker, type WorkerJob } from "../../shared/useWorker";
import { parsePlanBody, shapePlan, type PlanView } from "./planModel";
import type { ShapeReply, ShapeRequest } from "./planModel.worker";

const startWorker = () => new Worker(new URL("./planModel.worker.ts", import.meta.url), { type: "module" });

export function usePlanView(
  body: ArrayBuffer | null | undefined,
  estimated: boolean,
): { view: PlanView | null; error: string | null } {
  const [state, setState] = useState<{ view: PlanView | null; error: string | null }>({ view: null, error: null });
  useEffect(() => {
    if (!body) setState({ view: null, error: null });
  }, [body, estimated]);
  const job = useMemo(
    (): WorkerJob<Omit<ShapeRequest, "id">, ShapeReply> | null =>
      body
        ? {
            request: { body, estimated },
            inline: () => {
              try {
                setState({ view: shapePlan(parsePlanBody(body), estimated), error: null });
              } catch (e) {
                setState({ view: null, error: e instanceof Error ? e.message : String(e) });
              }
            },
            onReply: (reply) => {
              setState("view" in reply ? { view: reply.view, error: null } : { view: null, error: reply.error });
              return true;
            },
            onError: (message) => setState({ view: null, error: message || "the plan could not be shaped" }),
          }
        : null,
    [body, estimated],
  );
  useWorker(startWorker, job);
  return state;
}
