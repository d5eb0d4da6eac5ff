// SPDX-License-Identifier: Apache-2.0
// Lays a flame graph out in a Web Worker (where none exists, as in jsdom, in a macrotask instead) and
// keeps the last layout on screen while a newer one is computed, so live refreshes do not flicker.
import { useEffect, useState } from "react";
import { layoutFlame, type FlameFrame, type FlameInput, type FlameLayout } from "./flameModel";
import type { FlameReply, FlameRequest } from "./flame.worker";

export interface FlameLayoutState {
  layout: FlameLayout | null;
  /** The frames of the tree the layout belongs to. */
  frames: FlameFrame[];
  ms: number | null;
  error: string | null;
}

let nextId = 1;

export function useFlameLayout(input: FlameInput | null): FlameLayoutState {
  const [state, setState] = useState<FlameLayoutState>({ layout: null, frames: [], ms: null, error: null });
  useEffect(() => {
    if (!input) return;
    const id = nextId++;
    if (typeof Worker === "undefined") {
      const timer = setTimeout(() => {
        const t0 = performance.now();
        setState({ layout: layoutFlame(input), frames: input.frames, ms: performance.now() - t0, error: null });
      }, 0);
      return () => clearTimeout(timer);
    }
    const worker = new Worker(new URL("./flame.worker.ts", import.meta.url), { type: "module" });
    worker.onmessage = (ev: MessageEvent<FlameReply>) => {
      const m = ev.data;
      if (m.id !== id) return;
      if (m.type === "done") setState({ layout: m.layout, frames: input.frames, ms: m.ms, error: null });
      else if (m.type === "error") setState((s) => ({ ...s, error: m.message }));
      worker.terminate();
    };
    worker.onerror = (ev) => setState((s) => ({ ...s, error: ev.message || "the flame graph worker failed" }));
    const request: FlameRequest = { id, type: "layout", input };
    worker.postMessage(request);
    return () => worker.terminate();
  }, [input]);
  return state;
}
