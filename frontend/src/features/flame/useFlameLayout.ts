// SPDX-License-Identifier: Apache-2.0
// Lays a flame graph out in a Web Worker (shared/useWorker.ts; where none exists, as in jsdom, in a
// macrotask instead) and keeps the last layout on screen while a newer one is computed, so live refreshes
// do not flicker.
import { useMemo, useState } from "react";
import { useWorker, type WorkerJob } from "../../shared/useWorker";
import { layoutFlame, type FlameFrame, type FlameInput, type FlameLayout } from "./flameModel";
import type { FlameReply, FlameRequest } from "./flame.worker";

export interface FlameLayoutState {
  layout: FlameLayout | null;
  /** The frames of the tree the layout belongs to. */
  frames: FlameFrame[];
  ms: number | null;
  error: string | null;
}

export const startWorker = () => new Worker(new URL("./flame.worker.ts", import.meta.url), { type: "module" });

export function useFlameLayout(input: FlameInput | null): FlameLayoutState {
  const [state, setState] = useState<FlameLayoutState>({ layout: null, frames: [], ms: null, error: null });
  const job = useMemo((): WorkerJob<Omit<Extract<FlameRequest, { type: "layout" }>, "id">, FlameReply> | null => {
    if (!input) return null;
    return {
      request: { type: "layout", input },
      inline: () => {
        const t0 = performance.now();
        setState({ layout: layoutFlame(input), frames: input.frames, ms: performance.now() - t0, error: null });
      },
      onReply: (m) => {
        if (m.type === "done") setState({ layout: m.layout, frames: input.frames, ms: m.ms, error: null });
        else if (m.type === "error") setState((s) => ({ ...s, error: m.message }));
        return true;
      },
      onError: (message) => setState((s) => ({ ...s, error: message || "the flame graph worker failed" })),
    };
  }, [input]);
  useWorker(startWorker, job);
  return state;
}
