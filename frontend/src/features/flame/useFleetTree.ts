// SPDX-License-Identifier: Apache-2.0
// A fleet group's flame graph or compare answer, parsed and laid out in the flame worker (fleetTree.ts):
// the page only hands it the answer's bytes (copied, so the query cache keeps them) and gets back the
// layout, its frames and the rest of the answer; the last layout stays on screen while a newer one is made.
// Where no Worker exists (jsdom) the same work runs in a macrotask.
import { useMemo, useState } from "react";
import { useWorker, type WorkerJob } from "../../shared/useWorker";
import { layoutFlame, type FlameFrame, type FlameLayout } from "./flameModel";
import type { FlameReply, FlameRequest } from "./flame.worker";
import { readFleetTree, type FleetTreeSummary } from "./fleetTree";
import { startWorker } from "./useFlameLayout";

export interface FleetTreeState<S extends FleetTreeSummary> {
  layout: FlameLayout | null;
  frames: FlameFrame[];
  summary: S | null;
  error: string | null;
}

export function useFleetTree<S extends FleetTreeSummary>(body: ArrayBuffer | undefined): FleetTreeState<S> {
  const [state, setState] = useState<FleetTreeState<S>>({ layout: null, frames: [], summary: null, error: null });
  const job = useMemo((): WorkerJob<Omit<Extract<FlameRequest, { type: "tree" }>, "id">, FlameReply> | null => {
    if (!body) return null;
    return {
      request: { type: "tree", body },
      inline: () => {
        try {
          const { input, summary } = readFleetTree(body);
          setState({ layout: layoutFlame(input), frames: input.frames, summary: summary as S, error: null });
        } catch (e) {
          setState((s) => ({ ...s, error: e instanceof Error ? e.message : String(e) }));
        }
      },
      onReply: (m) => {
        if (m.type === "tree") setState({ layout: m.layout, frames: m.frames, summary: m.summary as S, error: null });
        else if (m.type === "error") setState((s) => ({ ...s, error: m.message }));
        return true;
      },
      onError: (message) => setState((s) => ({ ...s, error: message || "the flame graph worker failed" })),
    };
  }, [body]);
  useWorker(startWorker, job);
  return state;
}
