// SPDX-License-Identifier: Apache-2.0
// Draws a laid-out control-flow graph as SVG: blocks coloured by their sample counts, edges
// styled by successor kind, exit nodes for control leaving the function, with legends and
// pan/zoom. Blocks are focusable and open their instructions on click or Enter.
import { memo, useRef, type KeyboardEvent } from "react";
import { Link } from "react-router-dom";
import { line, curveBasis } from "d3-shape";
import type { CfgLayout, EdgeKind, PositionedNode } from "./cfgModel";
import { NO_SAMPLES_FILL } from "./cfgModel";
import { useZoom } from "./useZoom";

export const EDGE_STYLE: Record<EdgeKind, { stroke: string; dash?: string; label: string }> = {
  fallthrough: { stroke: "#57606a", label: "fallthrough" },
  taken: { stroke: "#0969da", dash: "6 4", label: "taken branch" },
  tail_call: { stroke: "#8250df", label: "tail call" },
  return: { stroke: "#1a7f37", label: "return" },
  indirect: { stroke: "#cf222e", dash: "2 3", label: "indirect jump" },
  other: { stroke: "#8c959f", dash: "1 4", label: "other" },
};

const KINDS = Object.keys(EDGE_STYLE) as EdgeKind[];
const path = line<{ x: number; y: number }>().x((p) => p.x).y((p) => p.y).curve(curveBasis);

export interface CfgGraphProps {
  layout: CfgLayout;
  hostId: string;
  colour: (samples: number | null) => string;
  maxSamples: number;
  samplesKnown: boolean;
  selected: string | null;
  onSelect: (node: PositionedNode) => void;
}

export const CfgGraph = memo(function CfgGraph({ layout, hostId, colour, maxSamples, samplesKnown, selected, onSelect }: CfgGraphProps) {
  const svgRef = useRef<SVGSVGElement>(null);
  const groupRef = useRef<SVGGElement>(null);
  const { fit, zoomBy } = useZoom(svgRef, groupRef, layout);

  const onKey = (e: KeyboardEvent, node: PositionedNode) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      onSelect(node);
    }
  };

  return (
    <div className="cfg">
      <div className="toolbar">
        <button type="button" onClick={() => zoomBy(1.25)} aria-label="Zoom in">+</button>
        <button type="button" onClick={() => zoomBy(0.8)} aria-label="Zoom out">−</button>
        <button type="button" onClick={fit}>Fit</button>
        <span className="muted small">drag to pan, scroll to zoom</span>
      </div>
      <svg ref={svgRef} className="cfg-svg" aria-label="Control-flow graph" role="img">
        <defs>
          {KINDS.map((k) => (
            <marker key={k} id={`arrow-${k}`} viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
              <path d="M 0 0 L 10 5 L 0 10 z" fill={EDGE_STYLE[k].stroke} />
            </marker>
          ))}
        </defs>
        <g ref={groupRef}>
          <g className="edges">
            {layout.edges.map((e) => (
              <path
                key={e.id}
                d={path(e.points) ?? ""}
                fill="none"
                stroke={EDGE_STYLE[e.kind].stroke}
                strokeWidth={1.4}
                strokeDasharray={EDGE_STYLE[e.kind].dash}
                markerEnd={`url(#arrow-${e.kind})`}
                data-kind={e.kind}
              />
            ))}
          </g>
          <g className="nodes">
            {layout.nodes.map((n) =>
              n.kind === "block" ? (
                <g
                  key={n.id}
                  data-testid="cfg-block"
                  className={`cfg-node block${selected === n.id ? " selected" : ""}${n.samples && n.samples > maxSamples * 0.55 ? " dark" : ""}`}
                  transform={`translate(${n.x - n.width / 2},${n.y - n.height / 2})`}
                  tabIndex={0}
                  onClick={() => onSelect(n)}
                  onKeyDown={(e) => onKey(e, n)}
                >
                  <title>{n.samples === null ? "samples unavailable" : `${n.samples} samples`}</title>
                  <rect width={n.width} height={n.height} rx={3} fill={colour(n.samples)} />
                  {n.lines.map((l, i) => (
                    <text key={i} x={n.width / 2} y={8 + 15 * i + 11} textAnchor="middle" className={i === 0 ? "addr" : "sub"}>{i > 0 ? " " : ""}{l}</text>
                  ))}
                </g>
              ) : (
                <ExitNode key={n.id} node={n} hostId={hostId} />
              ),
            )}
          </g>
        </g>
      </svg>
      <div className="legends">
        <ul className="legend" aria-label="Edge kinds">
          {KINDS.map((k) => (
            <li key={k}>
              <svg width="34" height="10" aria-hidden="true">
                <line x1="1" y1="5" x2="33" y2="5" stroke={EDGE_STYLE[k].stroke} strokeWidth="2" strokeDasharray={EDGE_STYLE[k].dash} />
              </svg>{" "}
              {EDGE_STYLE[k].label}
            </li>
          ))}
        </ul>
        <ColourLegend colour={colour} maxSamples={maxSamples} samplesKnown={samplesKnown} />
      </div>
    </div>
  );
});

function ExitNode({ node, hostId }: { node: PositionedNode; hostId: string }) {
  const shape = (
    <>
      <rect
        width={node.width}
        height={node.height}
        rx={node.kind === "return" ? node.height / 2 : 3}
        className={`exit exit-${node.kind}`}
      />
      {node.lines.map((l, i) => (
        <text key={i} x={node.width / 2} y={8 + 15 * i + 11} textAnchor="middle" className={i === 0 ? "sub" : "addr"}>{l}</text>
      ))}
    </>
  );
  const transform = `translate(${node.x - node.width / 2},${node.y - node.height / 2})`;
  if (node.functionId !== null) {
    return (
      <g transform={transform} className="cfg-node exit-node">
        <Link to={`/hosts/${encodeURIComponent(hostId)}/functions/${node.functionId}`}>{shape}</Link>
      </g>
    );
  }
  return <g transform={transform} className="cfg-node exit-node">{shape}</g>;
}

function ColourLegend({ colour, maxSamples, samplesKnown }: { colour: (s: number | null) => string; maxSamples: number; samplesKnown: boolean }) {
  if (!samplesKnown) return <p className="muted small">Block colours: samples unavailable.</p>;
  const steps = 8;
  return (
    <div className="colour-legend" aria-label="Block colour: samples per block">
      <span className="small">samples per block:</span>
      <svg width={20 + steps * 18} height="14" aria-hidden="true">
        <rect x="0" y="1" width="14" height="12" fill={NO_SAMPLES_FILL} stroke="#bbb" />
        {Array.from({ length: steps }, (_, i) => (
          <rect key={i} x={20 + i * 18} y="1" width="18" height="12" fill={colour(Math.max(1, ((i + 1) / steps) * maxSamples))} />
        ))}
      </svg>
      <span className="small">0 … {maxSamples}</span>
    </div>
  );
}
