// SPDX-License-Identifier: Apache-2.0
// The I-cache footprint as KernInst's Figure 2 draws it: one column per cache set, one cell per way;
// a cell holds a hot line, and a set holding more hot lines than it has ways is a conflict (its cells
// red, those past the ways drawn beyond the grid). Hovering a cell names the blocks on that line.
import { scaleBand } from "d3-scale";
import { useMemo, useState } from "react";
import type { HeatCell, HeatGrid } from "./planModel";

const CELL = 9;

export function Heatmap({ title, grid, testId }: { title: string; grid: HeatGrid; testId: string }) {
  const [hover, setHover] = useState<HeatCell | null>(null);
  const x = useMemo(
    () =>
      scaleBand<number>()
        .domain(Array.from({ length: grid.sets }, (_, i) => i))
        .range([0, grid.sets * CELL])
        .paddingInner(0.12),
    [grid.sets],
  );
  const width = grid.sets * CELL + 40;
  const height = grid.columns * CELL + 24;
  const bySlot = useMemo(() => new Map(grid.cells.map((c) => [`${c.set}:${c.way}`, c])), [grid.cells]);
  return (
    <figure className="heatmap" data-testid={testId}>
      <figcaption>
        <strong>{title}</strong>: {grid.hotLines} hot lines (minimum {grid.minimum}, ratio {grid.ratio.toFixed(2)},
        distance {grid.distance}), {grid.conflictSets} conflicting set{grid.conflictSets === 1 ? "" : "s"}
      </figcaption>
      <svg
        width={width}
        height={height}
        role="img"
        aria-label={`${title}: ${grid.hotLines} hot lines in ${grid.sets} sets of ${grid.ways} ways`}
      >
        <g transform="translate(30,4)">
          {Array.from({ length: grid.columns }, (_, way) => (
            <text key={`w${way}`} x={-4} y={way * CELL + CELL - 1} className="axis" textAnchor="end">
              {way < grid.ways ? way : "+"}
            </text>
          ))}
          {x.domain().map((set) =>
            Array.from({ length: grid.columns }, (_, way) => {
              const c = bySlot.get(`${set}:${way}`);
              const beyond = way >= grid.ways;
              if (!c && beyond) return null;
              const cls = !c ? "cell empty" : c.conflict ? "cell conflict" : "cell hot";
              return (
                <rect
                  key={`${set}:${way}`}
                  x={x(set)}
                  y={way * CELL}
                  width={x.bandwidth()}
                  height={CELL - 1}
                  className={cls}
                  data-set={set}
                  data-way={way}
                  onMouseEnter={() => setHover(c ?? null)}
                  onMouseLeave={() => setHover(null)}
                >
                  {c && (
                    <title>{`set ${c.set}, way ${c.way}, line ${c.line}${c.conflict ? " (conflict)" : ""}: ${c.blocks.join(", ")}`}</title>
                  )}
                </rect>
              );
            }),
          )}
          <text x={0} y={grid.columns * CELL + 14} className="axis">
            set 0
          </text>
          <text x={grid.sets * CELL} y={grid.columns * CELL + 14} className="axis" textAnchor="end">
            set {grid.sets - 1}
          </text>
        </g>
      </svg>
      <p className="heat-hover small" aria-live="polite">
        {hover ? (
          <>
            set {hover.set}, way {hover.way}, line <span className="addr">{hover.line}</span>: {hover.blocks.join(", ")}
          </>
        ) : (
          "Hover a cell to name the blocks on its line."
        )}
      </p>
    </figure>
  );
}

export function HeatLegend({ lineBytes, ways }: { lineBytes: number; ways: number }) {
  return (
    <p className="heat-legend small">
      <span className="swatch empty" /> no hot line <span className="swatch hot" /> a hot line ({lineBytes} bytes)
      <span className="swatch conflict" /> a set holding more than its {ways} ways (conflict)
    </p>
  );
}
