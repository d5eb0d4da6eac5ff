// SPDX-License-Identifier: Apache-2.0
// The host's samples over the chosen range as a stacked area chart (kernel work, user, idle, in
// samples per second), drawn with D3 scales and shapes into React-owned SVG. Brushing a span with the
// mouse selects it as an absolute range.
import { useEffect, useMemo, useRef, useState } from "react";
import { scaleLinear, scaleTime } from "d3-scale";
import { area, curveStepAfter } from "d3-shape";
import { brushX, type D3BrushEvent } from "d3-brush";
import { select } from "d3-selection";
import type { Timeline } from "../../api/types";
import { stackTimeline, SERIES } from "./timelineModel";

const HEIGHT = 120;
const M = { top: 8, right: 12, bottom: 20, left: 48 };

export function TimelineChart({
  data,
  onBrush,
}: {
  data: Timeline | undefined;
  onBrush: (from: Date, to: Date) => void;
}) {
  const wrapRef = useRef<HTMLDivElement>(null);
  const brushRef = useRef<SVGGElement>(null);
  const [width, setWidth] = useState(800);

  useEffect(() => {
    const el = wrapRef.current;
    if (!el || typeof ResizeObserver === "undefined") return;
    const ro = new ResizeObserver(() => setWidth(Math.max(300, el.clientWidth)));
    ro.observe(el);
    setWidth(Math.max(300, el.clientWidth || 800));
    return () => ro.disconnect();
  }, []);

  const from = data ? new Date(data.from) : null;
  const to = data ? new Date(data.to) : null;
  const stacked = useMemo(() => (data ? stackTimeline(data) : null), [data]);
  const x = useMemo(
    () =>
      scaleTime()
        .domain([from ?? new Date(0), to ?? new Date(1)])
        .range([M.left, width - M.right])
        .clamp(true),
    // eslint-disable-next-line react-hooks/exhaustive-deps -- dates compared by value below
    [from?.getTime(), to?.getTime(), width],
  );
  const y = useMemo(
    () =>
      scaleLinear()
        .domain([0, Math.max(1, stacked?.max ?? 1)])
        .nice()
        .range([HEIGHT - M.bottom, M.top]),
    [stacked],
  );

  useEffect(() => {
    const g = brushRef.current;
    if (!g) return;
    const b = brushX()
      .extent([
        [M.left, M.top],
        [width - M.right, HEIGHT - M.bottom],
      ])
      .on("end", (event: D3BrushEvent<unknown>) => {
        const sel = event.selection as [number, number] | null;
        if (!sel || !event.sourceEvent) return;
        select(g).call((s) => b.move(s, null));
        const a = x.invert(sel[0]);
        const c = x.invert(sel[1]);
        if (c.getTime() - a.getTime() >= 1000)
          onBrush(new Date(Math.floor(a.getTime() / 1000) * 1000), new Date(Math.ceil(c.getTime() / 1000) * 1000));
      });
    select(g).call(b);
    return () => {
      select(g).on(".brush", null);
    };
  }, [x, width, onBrush]);

  const areas = stacked
    ? SERIES.map((s, i) => {
        const gen = area<(typeof stacked.rows)[number]>()
          .curve(curveStepAfter)
          .x((r) => x(r.t))
          .y0((r) => y(r.stack[i][0]))
          .y1((r) => y(r.stack[i][1]));
        return { ...s, d: gen(stacked.rows) ?? "" };
      })
    : [];
  const ticks = x.ticks(Math.max(2, Math.floor(width / 110)));
  const fmt = x.tickFormat();

  return (
    <div className="timeline" ref={wrapRef}>
      <svg width={width} height={HEIGHT} role="img" aria-label="Samples over time (drag to select a range)">
        {y.ticks(3).map((t) => (
          <g key={t}>
            <line x1={M.left} x2={width - M.right} y1={y(t)} y2={y(t)} className="grid-line" />
            <text x={M.left - 4} y={y(t) + 3} textAnchor="end" className="axis">
              {t}
            </text>
          </g>
        ))}
        {areas.map((a) => (
          <path key={a.key} d={a.d} fill={a.colour} data-series={a.key} />
        ))}
        {ticks.map((t) => (
          <text key={t.getTime()} x={x(t)} y={HEIGHT - 5} textAnchor="middle" className="axis">
            {fmt(t)}
          </text>
        ))}
        <text x={4} y={M.top + 8} className="axis">
          /s
        </text>
        <g ref={brushRef} className="brush" />
      </svg>
      <ul className="legend timeline-legend">
        {SERIES.map((s) => (
          <li key={s.key}>
            <span className="swatch" style={{ background: s.colour }} /> {s.label}
          </li>
        ))}
        <li className="muted">
          samples per second{data ? `, ${data.step_s} s buckets` : ""}; drag across the chart to zoom into a range
        </li>
      </ul>
      {data && data.points.length === 0 && <p className="muted small">No samples in this range.</p>}
    </div>
  );
}
