// SPDX-License-Identifier: Apache-2.0
// Draws a laid-out flame graph: every cell on a canvas (trees have tens of thousands of frames), and the
// cells wide enough to carry a name as buttons over it, so they can be read, focused and clicked (and
// found by tests). Flame (root at the bottom) or icicle (root at the top); a click zooms into a frame and
// shows its details with a link to its function; a double click opens the function. Search highlights
// matches and dims the rest. A differential graph is coloured by change (red: grew from the baseline to the comparison, blue: shrank).
import { memo, useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState, type MouseEvent } from "react";
import { Link, useNavigate } from "react-router-dom";
import {
  diffColour,
  frameColour,
  visibleCells,
  type Cell,
  type FlameFrame,
  type FlameLayout,
  type SearchResult,
} from "./flameModel";
import { formatCount, formatRate, formatShare } from "../../lib/format";

export const ROW = 18;
const LABEL_MIN_PX = 36;
const MAX_BUTTONS = 2500;

export interface FlameGraphProps {
  layout: FlameLayout;
  frames: FlameFrame[];
  orientation: "flame" | "icicle";
  focus: number;
  onFocus: (node: number) => void;
  search: SearchResult | null;
  /** Link to a function's view: host and range query. */
  functionHref: (functionId: number) => string;
  /** Seconds of each range, for rates. */
  seconds: number;
  bSeconds?: number;
  label: string;
}

function describe(l: FlameLayout, frames: FlameFrame[], node: number, seconds: number, bSeconds?: number): string {
  const name = node === 0 ? "all samples" : (frames[l.frame[node]]?.name ?? "?");
  if (l.bTotal) {
    const a = l.rootTotal ? l.total[node] / l.rootTotal : 0;
    const b = l.bRootTotal ? l.bTotal[node] / l.bRootTotal : 0;
    return (
      `${name}: baseline ${formatCount(l.total[node])} (${formatShare(a)}), comparison ${formatCount(l.bTotal[node])} (${formatShare(b)}), ` +
      `change ${b >= a ? "+" : "−"}${(Math.abs(b - a) * 100).toFixed(1)} points` +
      (bSeconds ? `, ${formatRate(l.bTotal[node] / bSeconds)} in the comparison` : "")
    );
  }
  const share = l.rootTotal ? l.total[node] / l.rootTotal : 0;
  return `${name}: ${formatCount(l.total[node])} samples (${formatShare(share)}, ${formatRate(l.total[node] / Math.max(seconds, 1e-3))}), self ${formatCount(l.self[node])}`;
}

export const FlameGraph = memo(function FlameGraph(props: FlameGraphProps) {
  const { layout: l, frames, orientation, focus, onFocus, search, functionHref, seconds, bSeconds, label } = props;
  const wrapRef = useRef<HTMLDivElement>(null);
  const scrollRef = useRef<HTMLDivElement>(null);
  const canvasRef = useRef<HTMLCanvasElement>(null);
  const [width, setWidth] = useState(0);
  const [hover, setHover] = useState<{ node: number; x: number; y: number } | null>(null);
  const navigate = useNavigate();

  useLayoutEffect(() => {
    const el = wrapRef.current;
    if (!el) return;
    setWidth(el.clientWidth);
    if (typeof ResizeObserver === "undefined") return;
    const ro = new ResizeObserver(() => setWidth(el.clientWidth));
    ro.observe(el);
    return () => ro.disconnect();
  }, []);

  const cells = useMemo(() => (width > 0 ? visibleCells(l, focus, width) : []), [l, focus, width]);
  const rows = l.maxDepth + 1;
  const height = rows * ROW;
  // A deep graph scrolls inside its box; a flame graph opens at its root (the bottom).
  useLayoutEffect(() => {
    const el = scrollRef.current;
    if (el) el.scrollTop = orientation === "flame" ? el.scrollHeight : 0;
  }, [orientation, l, height]);
  const top = useCallback(
    (depth: number) => (orientation === "icicle" ? depth * ROW : height - (depth + 1) * ROW),
    [orientation, height],
  );
  const colourOf = useMemo(() => {
    if (l.delta) return diffColour(l);
    const byFrame = new Map<number, string>(); // a frame's colour is made once, not once per cell
    return (node: number) => {
      const fi = l.frame[node];
      let colour = byFrame.get(fi);
      if (colour === undefined) byFrame.set(fi, (colour = frameColour(frames[fi])));
      return colour;
    };
  }, [l, frames]);

  useEffect(() => {
    const canvas = canvasRef.current;
    const ctx = canvas?.getContext("2d");
    if (!canvas || !ctx || width <= 0) return;
    // Drawn in the next animation frame, a task apart from the render that laid the cells and labels
    // out, so neither holds the page's thread as long as both (issue 15: no task over 100 ms).
    const frame = requestAnimationFrame(() => {
      const dpr = window.devicePixelRatio || 1;
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, width, height);
      ctx.font = "11px ui-monospace, SFMono-Regular, 'DejaVu Sans Mono', monospace";
      ctx.textBaseline = "middle";
      for (const c of cells) {
        const dim = search !== null && c.node !== 0 && !search.matches[c.node];
        ctx.globalAlpha = dim ? 0.25 : 1;
        ctx.fillStyle = c.node === 0 ? "#eaeef2" : search?.matches[c.node] ? "#bf3989" : colourOf(c.node);
        const y = top(c.depth);
        ctx.fillRect(c.x, y, Math.max(c.width - (c.width > 3 ? 1 : 0), 0.5), ROW - 1);
      }
      ctx.globalAlpha = 1;
      canvas.dataset.cells = String(cells.length); // what was drawn, for tests and bench/flame
    });
    return () => cancelAnimationFrame(frame);
  }, [cells, width, height, colourOf, search, top]);

  // Cells wide enough for a name: buttons over the canvas.
  const labelled = useMemo(() => cells.filter((c) => c.width >= LABEL_MIN_PX).slice(0, MAX_BUTTONS), [cells]);

  const cellAt = useCallback(
    (x: number, y: number): Cell | null => {
      for (let i = cells.length - 1; i >= 0; i--) {
        const c = cells[i];
        const t = top(c.depth);
        if (x >= c.x && x < c.x + c.width && y >= t && y < t + ROW) return c;
      }
      return null;
    },
    [cells, top],
  );

  const onCanvasMove = (e: MouseEvent) => {
    const r = (e.currentTarget as HTMLElement).getBoundingClientRect();
    const c = cellAt(e.clientX - r.left, e.clientY - r.top);
    setHover(c ? { node: c.node, x: e.clientX - r.left, y: e.clientY - r.top } : null);
  };
  // A double-click opens the frame its first click chose: that click zooms, so by the second one
  // another frame may lie under the pointer, and that second click (detail 2) must not choose it.
  const clicked = useRef<number | null>(null);
  const choose = (node: number) => {
    clicked.current = node;
    onFocus(node);
  };
  const onCanvasClick = (e: MouseEvent) => {
    const r = (e.currentTarget as HTMLElement).getBoundingClientRect();
    const c = cellAt(e.clientX - r.left, e.clientY - r.top);
    if (c && e.detail < 2) choose(c.node);
  };
  const open = (node: number) => {
    const fid = frames[l.frame[node]]?.function_id;
    if (fid !== null && fid !== undefined) navigate(functionHref(fid));
  };

  return (
    <div className="flame-graph">
      <FrameDetails
        l={l}
        frames={frames}
        node={focus}
        functionHref={functionHref}
        seconds={seconds}
        bSeconds={bSeconds}
        onFocus={onFocus}
      />
      <div ref={scrollRef} className="flame-scroll">
        <div
          ref={wrapRef}
          className="flame-canvas-wrap"
          style={{ height }}
          role="group"
          aria-label={label}
          onMouseMove={onCanvasMove}
          onMouseLeave={() => setHover(null)}
          onClick={onCanvasClick}
          onDoubleClick={() => {
            if (clicked.current !== null) open(clicked.current);
          }}
        >
          <canvas ref={canvasRef} style={{ width, height }} aria-hidden="true" data-testid="flame-canvas" />
          <div className="flame-labels">
            {labelled.map((c) => {
              const f = frames[l.frame[c.node]];
              const name = c.node === 0 ? "all" : (f?.name ?? "?");
              return (
                <button
                  key={c.node}
                  type="button"
                  className={`flame-cell${focus === c.node ? " focused" : ""}`}
                  data-testid="flame-frame"
                  data-name={name}
                  style={{ left: c.x, top: top(c.depth), width: c.width - 1, height: ROW - 1 }}
                  aria-label={describe(l, frames, c.node, seconds, bSeconds)}
                  onClick={(e) => {
                    e.stopPropagation();
                    if (e.detail < 2) choose(c.node);
                  }}
                >
                  {name}
                </button>
              );
            })}
          </div>
          {hover && (
            <div
              className="flame-tooltip"
              role="tooltip"
              style={{ left: Math.min(hover.x + 12, Math.max(0, width - 360)), top: hover.y + 14 }}
            >
              {describe(l, frames, hover.node, seconds, bSeconds)}
              {hover.node > 0 && <div className="muted small">{frames[l.frame[hover.node]]?.module}</div>}
            </div>
          )}
        </div>
      </div>
    </div>
  );
});

function FrameDetails({
  l,
  frames,
  node,
  functionHref,
  seconds,
  bSeconds,
  onFocus,
}: {
  l: FlameLayout;
  frames: FlameFrame[];
  node: number;
  functionHref: (fid: number) => string;
  seconds: number;
  bSeconds?: number;
  onFocus: (node: number) => void;
}) {
  if (node <= 0 || node >= l.n)
    return <p className="muted small flame-details">Click a frame to zoom into it; double-click opens its function.</p>;
  const f = frames[l.frame[node]];
  return (
    <div className="flame-details" role="status" aria-label="Selected frame">
      <strong className="addr">{f?.name}</strong> <span className="muted">{f?.module}</span> ·{" "}
      {describe(l, frames, node, seconds, bSeconds)}{" "}
      {f?.function_id !== null && f?.function_id !== undefined ? (
        <Link to={functionHref(f.function_id)}>Open function</Link>
      ) : (
        <span className="muted">(not a function of a stored catalog)</span>
      )}{" "}
      <button type="button" onClick={() => onFocus(l.parent[node] > 0 ? l.parent[node] : 0)}>
        Zoom out
      </button>{" "}
      <button type="button" onClick={() => onFocus(0)}>
        Reset zoom
      </button>
    </div>
  );
}
