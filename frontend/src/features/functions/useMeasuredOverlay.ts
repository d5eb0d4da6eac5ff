// SPDX-License-Identifier: Apache-2.0
// Runs shapeOverlay in a Web Worker (one per page, reused for every refresh; shared/useWorker.ts); where
// no Worker exists (unit tests in jsdom) it shapes in a macrotask instead.
import { useEffect, useMemo, useState } from "react";
import type { MeasurementCfg } from "../../api/types";
import type { CfgLayout } from "../../shared/cfg/cfgModel";
import { useWorker, type WorkerJob } from "../../shared/useWorker";
import { shapeOverlay, type MeasuredOverlay, type OverlayGraph } from "./measuredOverlay";
import type { OverlayReply, OverlayRequest } from "./measuredOverlay.worker";

const startWorker = () => new Worker(new URL("./measuredOverlay.worker.ts", import.meta.url), { type: "module" });

export function useMeasuredOverlay(layout: CfgLayout | null, cfg: MeasurementCfg | undefined): MeasuredOverlay | null {
  const [overlay, setOverlay] = useState<MeasuredOverlay | null>(null);
  const graph = useMemo<OverlayGraph | null>(
    () =>
      layout && {
        nodes: layout.nodes.map((n) => ({ id: n.id, kind: n.kind, offset: n.block?.offset ?? null })),
        edges: layout.edges.map((e) => ({ id: e.id, source: e.source, kind: e.kind })),
      },
    [layout],
  );
  useEffect(() => {
    if (!graph || !cfg) setOverlay(null);
  }, [graph, cfg]);
  const job = useMemo(
    (): WorkerJob<Omit<OverlayRequest, "id">, OverlayReply> | null =>
      graph && cfg
        ? {
            request: { graph, cfg },
            inline: () => setOverlay(shapeOverlay(graph, cfg)),
            onReply: (reply) => {
              setOverlay(reply.overlay);
              return true;
            },
          }
        : null,
    [graph, cfg],
  );
  useWorker(startWorker, job, true);
  return overlay;
}
