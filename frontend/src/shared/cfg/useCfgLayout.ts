// SPDX-License-Identifier: Apache-2.0
// Lays out a CFG model in a Web Worker so the page never blocks, reporting the phase and elapsed time
// while it works (shared/useWorker.ts; where no Worker exists, as in jsdom, in a macrotask instead).
import { useEffect, useMemo, useState } from "react";
import { useWorker, type WorkerJob } from "../useWorker";
import { assembleLayout, layoutCfg, layoutInput, type CfgLayout, type CfgModel } from "./cfgModel";
import type { LayoutReply, LayoutRequest } from "./cfgLayout.worker";

export interface LayoutState {
  layout: CfgLayout | null;
  phase: string;
  fraction: number;
  startedAt: number;
  ms: number | null;
  error: string | null;
}

const startWorker = () => new Worker(new URL("./cfgLayout.worker.ts", import.meta.url), { type: "module" });

export function useCfgLayout(model: CfgModel): LayoutState {
  const [state, setState] = useState<LayoutState>(() => initial());
  const empty = model.nodes.length === 0;
  useEffect(() => {
    if (empty)
      setState({
        ...initial(),
        layout: { width: 0, height: 0, nodes: [], edges: [] },
        ms: 0,
        phase: "done",
        fraction: 1,
      });
  }, [model, empty]);
  const job = useMemo((): WorkerJob<Omit<LayoutRequest, "id">, LayoutReply> | null => {
    if (empty) return null;
    let startedAt = 0;
    return {
      request: layoutInput(model),
      start: () => {
        startedAt = performance.now();
        setState({ ...initial(), startedAt });
      },
      inline: () => {
        const layout = layoutCfg(model);
        setState({ layout, phase: "done", fraction: 1, startedAt, ms: performance.now() - startedAt, error: null });
      },
      onReply: (m) => {
        if (m.type === "progress") setState((s) => ({ ...s, phase: m.phase, fraction: m.fraction }));
        else if (m.type === "error") setState((s) => ({ ...s, error: m.message }));
        else {
          const layout = assembleLayout(model, {
            width: m.width,
            height: m.height,
            positions: new Map(m.positions),
            routes: new Map(m.routes),
          });
          setState({ layout, phase: "done", fraction: 1, startedAt, ms: m.ms, error: null });
          return true;
        }
        return false;
      },
      onError: (message) => setState((s) => ({ ...s, error: message || "the layout worker failed" })),
    };
  }, [model, empty]);
  useWorker(startWorker, job);
  return state;
}

function initial(): LayoutState {
  return { layout: null, phase: "starting", fraction: 0, startedAt: performance.now(), ms: null, error: null };
}
