// SPDX-License-Identifier: Apache-2.0
// The whole CFG in miniature (a canvas: a thousand blocks draw in a millisecond), coloured like the
// graph, with the current view as a rectangle; clicking or dragging moves the view there. And the
// overview: the same drawing at the view's zoom, used instead of SVG when a large graph is zoomed out.
import { useEffect, useRef, type PointerEvent } from "react";
import type { CfgLayout } from "../../shared/cfg/cfgModel";
import type { View } from "./cfgView";

const MAX_W = 180;
const MAX_H = 180;

export function Minimap({
  layout,
  colour,
  view,
  size,
  onNavigate,
}: {
  layout: CfgLayout;
  colour: (samples: number | null) => string;
  view: View;
  size: { width: number; height: number };
  onNavigate: (x: number, y: number) => void;
}) {
  const canvasRef = useRef<HTMLCanvasElement>(null);
  const s = Math.min(MAX_W / Math.max(1, layout.width), MAX_H / Math.max(1, layout.height));
  const w = Math.max(20, Math.round(layout.width * s));
  const h = Math.max(20, Math.round(layout.height * s));

  useEffect(() => {
    const ctx = canvasRef.current?.getContext("2d");
    if (!ctx) return;
    ctx.clearRect(0, 0, w, h);
    for (const n of layout.nodes) {
      ctx.fillStyle = n.kind === "block" ? colour(n.samples) : "#c8ccd1";
      ctx.fillRect(
        (n.x - n.width / 2) * s,
        (n.y - n.height / 2) * s,
        Math.max(1, n.width * s),
        Math.max(1, n.height * s),
      );
    }
  }, [layout, colour, s, w, h]);

  const vx = (-view.x / view.k) * s;
  const vy = (-view.y / view.k) * s;
  const vw = (size.width / view.k) * s;
  const vh = (size.height / view.k) * s;

  const go = (e: PointerEvent<HTMLDivElement>) => {
    const r = e.currentTarget.getBoundingClientRect();
    onNavigate((e.clientX - r.left) / s, (e.clientY - r.top) / s);
  };

  return (
    <div
      className="minimap"
      style={{ width: w, height: h }}
      aria-label="Minimap: click to move the view"
      role="navigation"
      onPointerDown={(e) => {
        e.currentTarget.setPointerCapture(e.pointerId);
        go(e);
      }}
      onPointerMove={(e) => {
        if (e.buttons & 1) go(e);
      }}
    >
      <canvas ref={canvasRef} width={w} height={h} />
      <div className="minimap-view" style={{ left: vx, top: vy, width: vw, height: vh }} />
    </div>
  );
}

/** The graph drawn on a canvas over the SVG at the current view (blocks and edges, no text). */
export function Overview({
  layout,
  colour,
  view,
  size,
}: {
  layout: CfgLayout;
  colour: (samples: number | null) => string;
  view: View;
  size: { width: number; height: number };
}) {
  const canvasRef = useRef<HTMLCanvasElement>(null);
  const ratio = typeof window !== "undefined" ? window.devicePixelRatio || 1 : 1;
  useEffect(() => {
    const ctx = canvasRef.current?.getContext("2d");
    if (!ctx) return;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, size.width, size.height);
    ctx.setTransform(ratio * view.k, 0, 0, ratio * view.k, ratio * view.x, ratio * view.y);
    ctx.lineWidth = 1 / view.k;
    ctx.strokeStyle = "#8c959f";
    ctx.beginPath();
    for (const e of layout.edges) {
      e.points.forEach((p, i) => (i === 0 ? ctx.moveTo(p.x, p.y) : ctx.lineTo(p.x, p.y)));
    }
    ctx.stroke();
    for (const n of layout.nodes) {
      ctx.fillStyle = n.kind === "block" ? colour(n.samples) : "#ffffff";
      ctx.fillRect(n.x - n.width / 2, n.y - n.height / 2, n.width, n.height);
      ctx.strokeRect(n.x - n.width / 2, n.y - n.height / 2, n.width, n.height);
    }
  }, [layout, colour, view, size, ratio]);
  return (
    <canvas
      ref={canvasRef}
      className="cfg-overview"
      data-testid="cfg-overview"
      width={size.width * ratio}
      height={size.height * ratio}
      style={{ width: size.width, height: size.height }}
      aria-hidden="true"
    />
  );
}
