// SPDX-License-Identifier: Apache-2.0
// Pan and zoom for an SVG drawing with d3-zoom: React draws the content, this hook moves the content
// group directly on every zoom event and reports the view to React at most once per animation frame
// (large graphs use it to draw only what is in view, and the minimap to show where the view is).
import { useCallback, useEffect, useRef, useState, type RefObject } from "react";
import { select } from "d3-selection";
import { zoom, zoomIdentity, type D3ZoomEvent, type ZoomBehavior } from "d3-zoom";
import { MAX_SCALE, MIN_SCALE, type View } from "./cfgView";

export interface ZoomControls {
  view: View;
  size: { width: number; height: number };
  setView: (v: View) => void;
  zoomBy: (factor: number) => void;
}

export function useZoom(
  svgRef: RefObject<SVGSVGElement | null>,
  groupRef: RefObject<SVGGElement | null>,
  initial: (width: number, height: number) => View,
  /** The view is set to `initial` when this changes (a new drawing), not when the drawing is recoloured. */
  resetKey: string,
): ZoomControls {
  const behavior = useRef<ZoomBehavior<SVGSVGElement, unknown> | null>(null);
  const [view, setViewState] = useState<View>({ k: 1, x: 0, y: 0 });
  const [size, setSize] = useState({ width: 800, height: 560 });
  const frame = useRef<number | null>(null);
  const latest = useRef<View>(view);
  const initialRef = useRef(initial);
  initialRef.current = initial;

  const setView = useCallback(
    (v: View) => {
      const svg = svgRef.current;
      const z = behavior.current;
      if (!svg || !z) return;
      select(svg).call((s) => z.transform(s, zoomIdentity.translate(v.x, v.y).scale(v.k)));
    },
    [svgRef],
  );

  useEffect(() => {
    const svg = svgRef.current;
    if (!svg) return;
    const w = svg.clientWidth || 800;
    const h = svg.clientHeight || 560;
    setSize({ width: w, height: h });
    const z = zoom<SVGSVGElement, unknown>()
      // An explicit extent: the default reads SVG length properties some DOMs lack.
      .extent(() => [
        [0, 0],
        [svg.clientWidth || 800, svg.clientHeight || 560],
      ])
      .scaleExtent([MIN_SCALE, MAX_SCALE])
      .on("zoom", (event: D3ZoomEvent<SVGSVGElement, unknown>) => {
        const t = event.transform;
        groupRef.current?.setAttribute("transform", t.toString());
        latest.current = { k: t.k, x: t.x, y: t.y };
        if (frame.current === null) {
          frame.current = requestAnimationFrame(() => {
            frame.current = null;
            setViewState(latest.current);
          });
        }
      });
    behavior.current = z;
    select(svg).call(z).on("dblclick.zoom", null);
    const v = initialRef.current(w, h);
    select(svg).call((s) => z.transform(s, zoomIdentity.translate(v.x, v.y).scale(v.k)));
    setViewState(v);
    return () => {
      select(svg).on(".zoom", null);
      if (frame.current !== null) cancelAnimationFrame(frame.current);
      frame.current = null;
      behavior.current = null;
    };
  }, [svgRef, groupRef, resetKey]);

  const zoomBy = useCallback(
    (factor: number) => {
      const svg = svgRef.current;
      const z = behavior.current;
      if (svg && z) select(svg).call((s) => z.scaleBy(s, factor));
    },
    [svgRef],
  );

  return { view, size, setView, zoomBy };
}
