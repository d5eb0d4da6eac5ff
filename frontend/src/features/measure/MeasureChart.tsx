// SPDX-License-Identifier: Apache-2.0
// A measurement's live time series: one line per resource (a metric per second of each bucket), a
// time axis, a value axis with its unit, and a legend. Shaping runs in a Web Worker (shared/useWorker.ts;
// in a macrotask where none exists); D3 scales and shapes draw into React-owned SVG.
import { useMemo, useRef, useState } from "react";
import { scaleLinear, scaleOrdinal, scaleTime } from "d3-scale";
import { schemeTableau10 } from "d3-scale-chromatic";
import { line } from "d3-shape";
import type { MeasurementSeries } from "../../api/types";
import { useWorker, type WorkerJob } from "../../shared/useWorker";
import { chartSeries, type ChartSeries } from "./measureModel";
import type { SeriesReply, SeriesRequest } from "./measure.worker";

const WIDTH = 760;
const HEIGHT = 220;
const M = { top: 10, right: 16, bottom: 24, left: 64 };
const UNITS = { count: "calls/s", wall: "threads (wall s/s)", vtime: "threads on CPU (s/s)" } as const;

const startWorker = () => new Worker(new URL("./measure.worker.ts", import.meta.url), { type: "module" });

function useShapedSeries(
  series: MeasurementSeries | undefined,
  names: Map<number, string>,
  metric: "count" | "wall" | "vtime",
) {
  const [shaped, setShaped] = useState<ChartSeries[]>([]);
  const job = useMemo(
    (): WorkerJob<Omit<SeriesRequest, "id">, SeriesReply> | null =>
      series
        ? {
            request: { series, names: [...names], metric },
            inline: () => setShaped(chartSeries(series, names, metric)),
            onReply: (reply) => {
              setShaped(reply.shaped);
              return true;
            },
          }
        : null,
    [series, names, metric],
  );
  useWorker(startWorker, job);
  return shaped;
}

export function MeasureChart({
  series,
  names,
  metric,
}: {
  series: MeasurementSeries | undefined;
  names: Map<number, string>;
  metric: "count" | "wall" | "vtime";
}) {
  const shaped = useShapedSeries(series, names, metric);
  const from = series ? Date.parse(series.from) : 0;
  const to = series ? Date.parse(series.to) : 1;
  const x = useMemo(
    () =>
      scaleTime()
        .domain([new Date(from), new Date(to)])
        .range([M.left, WIDTH - M.right]),
    [from, to],
  );
  const max = Math.max(1e-9, ...shaped.flatMap((s) => s.points.map((p) => p.v)));
  const y = useMemo(
    () =>
      scaleLinear()
        .domain([0, max])
        .nice()
        .range([HEIGHT - M.bottom, M.top]),
    [max],
  );
  const colour = scaleOrdinal<number, string>(schemeTableau10);
  const path = line<{ t: number; v: number }>()
    .x((p) => x(new Date(p.t)))
    .y((p) => y(p.v));
  const ref = useRef<SVGSVGElement>(null);
  return (
    <figure className="measure-chart" aria-label={`${metric} over time`}>
      <svg
        ref={ref}
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        width="100%"
        role="img"
        aria-label={`${metric} per second of each resource`}
      >
        <g className="axis" aria-hidden="true">
          {x.ticks(6).map((t) => (
            <g key={t.getTime()} transform={`translate(${x(t)},0)`}>
              <line y1={HEIGHT - M.bottom} y2={HEIGHT - M.bottom + 4} stroke="currentColor" />
              <text y={HEIGHT - 6} textAnchor="middle" fontSize="10">
                {t.toLocaleTimeString()}
              </text>
            </g>
          ))}
          {y.ticks(4).map((v) => (
            <g key={v} transform={`translate(0,${y(v)})`}>
              <line x1={M.left - 4} x2={WIDTH - M.right} stroke="currentColor" opacity={0.15} />
              <text x={M.left - 6} dy="0.32em" textAnchor="end" fontSize="10">
                {v.toLocaleString()}
              </text>
            </g>
          ))}
          <text x={12} y={M.top + 2} fontSize="10" transform={`rotate(90 12 ${M.top + 2})`}>
            {UNITS[metric]}
          </text>
        </g>
        {shaped.map((s) => (
          <g key={s.resource} className="series" data-resource={s.resource}>
            <path d={path(s.points) ?? ""} fill="none" stroke={colour(s.resource)} strokeWidth={1.5} />
            {/* A dot per bucket: a measurement one bucket long is a point, not a line. */}
            {s.points.map((p) => (
              <circle key={p.t} cx={x(new Date(p.t))} cy={y(p.v)} r={2.5} fill={colour(s.resource)}>
                <title>{`${s.name}: ${p.v.toLocaleString(undefined, { maximumSignificantDigits: 4 })} ${UNITS[metric]} at ${new Date(p.t).toLocaleTimeString()}`}</title>
              </circle>
            ))}
          </g>
        ))}
      </svg>
      <figcaption>
        <ul className="legend" aria-label="Legend">
          {shaped.map((s) => {
            const last = s.points.at(-1);
            return (
              <li key={s.resource}>
                <span className="swatch" style={{ background: colour(s.resource) }} aria-hidden="true" />
                {s.name}
                {last ? `: ${last.v.toLocaleString(undefined, { maximumSignificantDigits: 4 })} ${UNITS[metric]}` : ""}
              </li>
            );
          })}
        </ul>
      </figcaption>
    </figure>
  );
}
