// SPDX-License-Identifier: Apache-2.0
// Pan and zoom for an SVG drawing with d3-zoom: React draws the content, this hook only moves
// the content group. The initial view fits the graph's width and shows its entry at the top.
import { useCallback, useEffect, useRef, type RefObject } from "react";
import { select } from "d3-selection";
import { zoom, zoomIdentity, type ZoomBehavior } from "d3-zoom";

/** Block labels are drawn at 10-11 px; below this scale they cannot be read. */
const MIN_READABLE_SCALE = 0.85;

export interface ZoomControls {
  fit: () => void;
  zoomBy: (factor: number) => void;
}

export function useZoom(
  svgRef: RefObject<SVGSVGElement | null>,
  groupRef: RefObject<SVGGElement | null>,
  content: { width: number; height: number },
): ZoomControls {
  const behavior = useRef<ZoomBehavior<SVGSVGElement, unknown> | null>(null);

  // readable: the initial view, never so small that block labels become unreadable (a tall graph
  // starts at its entry and is explored by panning); otherwise the whole graph (the Fit button).
  const place = useCallback((readable: boolean) => {
    const svg = svgRef.current;
    const z = behavior.current;
    if (!svg || !z) return;
    const vw = svg.clientWidth || 800;
    const vh = svg.clientHeight || 560;
    const w = Math.max(1, content.width);
    const h = Math.max(1, content.height);
    const whole = Math.min(1.25, vw / w, vh / h);
    const k = readable ? Math.max(MIN_READABLE_SCALE, Math.min(1.25, vw / w)) : Math.max(0.05, whole);
    const x = (vw - w * k) / 2;
    const y = h * k <= vh ? (vh - h * k) / 2 : 0;
    select(svg).call((s) => z.transform(s, zoomIdentity.translate(x, y).scale(k)));
  }, [svgRef, content.width, content.height]);
  const fit = useCallback(() => place(false), [place]);

  useEffect(() => {
    const svg = svgRef.current;
    if (!svg) return;
    const z = zoom<SVGSVGElement, unknown>()
      // An explicit extent: the default reads SVG length properties some DOMs lack.
      .extent(() => [[0, 0], [svg.clientWidth || 800, svg.clientHeight || 560]])
      .scaleExtent([0.05, 4])
      .on("zoom", (event) => {
        groupRef.current?.setAttribute("transform", String((event as { transform: unknown }).transform));
      });
    behavior.current = z;
    select(svg).call(z).on("dblclick.zoom", null);
    place(true);
    return () => {
      select(svg).on(".zoom", null);
      behavior.current = null;
    };
  }, [svgRef, groupRef, place]);

  const zoomBy = useCallback((factor: number) => {
    const svg = svgRef.current;
    const z = behavior.current;
    if (svg && z) select(svg).call((s) => z.scaleBy(s, factor));
  }, [svgRef]);

  return { fit, zoomBy };
}
