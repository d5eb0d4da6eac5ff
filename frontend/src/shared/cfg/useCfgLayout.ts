// SPDX-License-Identifier: Apache-2.0
// Lays out a CFG model in a Web Worker so the page never blocks, reporting the phase and elapsed time
// while it works. Where no Worker exists (unit tests in jsdom) it lays out in a macrotask instead.
import { useEffect, useState } from "react";
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

let nextId = 1;

export function useCfgLayout(model: CfgModel): LayoutState {
  const [state, setState] = useState<LayoutState>(() => initial());
  useEffect(() => {
    const id = nextId++;
    const startedAt = performance.now();
    setState({ ...initial(), startedAt });
    if (model.nodes.length === 0) {
      setState({ ...initial(), startedAt, layout: { width: 0, height: 0, nodes: [], edges: [] }, ms: 0, phase: "done", fraction: 1 });
      return;
    }
    if (typeof Worker === "undefined") {
      const timer = setTimeout(() => {
        const layout = layoutCfg(model);
        setState({ layout, phase: "done", fraction: 1, startedAt, ms: performance.now() - startedAt, error: null });
      }, 0);
      return () => clearTimeout(timer);
    }
    const worker = new Worker(new URL("./cfgLayout.worker.ts", import.meta.url), { type: "module" });
    worker.onmessage = (ev: MessageEvent<LayoutReply>) => {
      const m = ev.data;
      if (m.id !== id) return;
      if (m.type === "progress") setState((s) => ({ ...s, phase: m.phase, fraction: m.fraction }));
      else if (m.type === "error") setState((s) => ({ ...s, error: m.message }));
      else {
        const layout = assembleLayout(model, { width: m.width, height: m.height, positions: new Map(m.positions), routes: new Map(m.routes) });
        setState({ layout, phase: "done", fraction: 1, startedAt, ms: m.ms, error: null });
        worker.terminate();
      }
    };
    worker.onerror = (ev) => setState((s) => ({ ...s, error: ev.message || "the layout worker failed" }));
    const input = layoutInput(model);
    const request: LayoutRequest = { id, ...input };
    worker.postMessage(request);
    return () => worker.terminate();
  }, [model]);
  return state;
}

function initial(): LayoutState {
  return { layout: null, phase: "starting", fraction: 0, startedAt: performance.now(), ms: null, error: null };
}
