// SPDX-License-Identifier: Apache-2.0
// Runs shapeOverlay in a Web Worker (one per page, reused for every refresh); where no Worker exists
// (unit tests in jsdom) it shapes in a macrotask instead.
import { useEffect, useMemo, useRef, useState } from "react";
import type { MeasurementCfg } from "../../api/types";
import type { CfgLayout } from "../../shared/cfg/cfgModel";
import { shapeOverlay, type MeasuredOverlay, type OverlayGraph } from "./measuredOverlay";
import type { OverlayReply, OverlayRequest } from "./measuredOverlay.worker";

export function useMeasuredOverlay(layout: CfgLayout | null, cfg: MeasurementCfg | undefined): MeasuredOverlay | null {
  const [overlay, setOverlay] = useState<MeasuredOverlay | null>(null);
  const worker = useRef<Worker | null>(null);
  const seq = useRef(0);
  const graph = useMemo<OverlayGraph | null>(() => layout && {
    nodes: layout.nodes.map((n) => ({ id: n.id, kind: n.kind, offset: n.block?.offset ?? null })),
    edges: layout.edges.map((e) => ({ id: e.id, source: e.source, kind: e.kind })),
  }, [layout]);
  useEffect(() => () => worker.current?.terminate(), []);
  useEffect(() => {
    if (!graph || !cfg) {
      setOverlay(null);
      return;
    }
    const id = ++seq.current;
    if (typeof Worker === "undefined") {
      const t = setTimeout(() => setOverlay(shapeOverlay(graph, cfg)), 0);
      return () => clearTimeout(t);
    }
    if (!worker.current) {
      worker.current = new Worker(new URL("./measuredOverlay.worker.ts", import.meta.url), { type: "module" });
    }
    worker.current.onmessage = (ev: MessageEvent<OverlayReply>) => {
      if (ev.data.id === seq.current) setOverlay(ev.data.overlay);
    };
    worker.current.postMessage({ id, graph, cfg } satisfies OverlayRequest);
  }, [graph, cfg]);
  return overlay;
}
