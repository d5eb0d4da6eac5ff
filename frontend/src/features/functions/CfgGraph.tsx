// SPDX-License-Identifier: Apache-2.0
// Draws a laid-out control-flow graph as SVG: blocks coloured by their sample counts over the chosen
// range (the count written on each block), edges styled by successor kind, exit nodes for control
// leaving the function, a minimap, legends and pan/zoom. Large graphs draw only what is in view (and
// no text when zoomed too far out to read it), so moving around never blocks the page. Blocks are
// focusable and open their instructions on click or Enter.
import { memo, useCallback, useEffect, useMemo, useRef, useState, type FormEvent, type KeyboardEvent } from "react";
import { Link } from "react-router-dom";
import { line, curveBasis } from "d3-shape";
import type { CfgLayout, EdgeKind, PositionedNode } from "../../shared/cfg/cfgModel";
import { NO_DATA_FILL, NO_SAMPLES_FILL, legendStops, type ScaleMode } from "../../shared/cfg/colourScale";
import type { MeasuredOverlay, OverlayBlock, OverlayEdge } from "./measuredOverlay";
import {
  CULL_THRESHOLD,
  READABLE_SCALE,
  TEXT_SCALE,
  centreOn,
  edgeBoxes,
  intersects,
  nodeRect,
  visibleRect,
  type View,
} from "./cfgView";
import { Minimap, Overview } from "./Minimap";
import { useZoom } from "./useZoom";
import { formatCount } from "../../lib/format";
import { EDGE_STYLE } from "../../shared/cfg/cfgStyle";

const KINDS = Object.keys(EDGE_STYLE) as EdgeKind[];
const path = line<{ x: number; y: number }>()
  .x((p) => p.x)
  .y((p) => p.y)
  .curve(curveBasis);

export interface ColourLegendInfo {
  mode: ScaleMode;
  max: number;
  /** Samples of the whole function in the range; 0 shows "no samples". */
  total: number;
  samplesKnown: boolean;
  rangeLabel: string;
}

/** A measurement's counts drawn over the graph instead of the samples (see measuredOverlay.ts). */
export interface MeasuredInfo {
  overlay: MeasuredOverlay;
  colour: (count: number | null) => string;
  dark: (count: number | null) => boolean;
  mode: ScaleMode;
  max: number;
  measurementId: string;
  rangeLabel: string;
}

export interface CfgGraphProps {
  measured?: MeasuredInfo | null;
  layout: CfgLayout;
  hostId: string;
  colour: (samples: number | null) => string;
  dark: (samples: number | null) => boolean;
  legend: ColourLegendInfo;
  selected: string | null;
  onSelect: (node: PositionedNode) => void;
  /** Centre on this node whenever `seq` changes (go to hottest, find by address, a linked block). */
  focus: { id: string; seq: number } | null;
  entryId: string | null;
  hottestId: string | null;
  initialView: (layout: CfgLayout, width: number, height: number) => View;
  onScaleMode: (mode: ScaleMode) => void;
  onFind: (query: string) => string | null;
  onGoHottest: () => void;
}

export const CfgGraph = memo(function CfgGraph(props: CfgGraphProps) {
  const {
    layout,
    hostId,
    colour,
    dark,
    legend,
    selected,
    onSelect,
    focus,
    entryId,
    hottestId,
    onScaleMode,
    onFind,
    onGoHottest,
    measured,
  } = props;
  const mBlocks = useMemo(() => (measured ? new Map<string, OverlayBlock>(measured.overlay.blocks) : null), [measured]);
  const mEdges = useMemo(() => (measured ? new Map<string, OverlayEdge>(measured.overlay.edges) : null), [measured]);
  const svgRef = useRef<SVGSVGElement>(null);
  const groupRef = useRef<SVGGElement>(null);
  const makeInitial = props.initialView;
  const initial = useCallback((w: number, h: number) => makeInitial(layout, w, h), [makeInitial, layout]);
  const geometry = `${layout.width}x${layout.height}:${layout.nodes.length}:${layout.edges.length}`;
  const { view, size, setView, zoomBy } = useZoom(svgRef, groupRef, initial, geometry);
  const [findText, setFindText] = useState("");
  const [findError, setFindError] = useState<string | null>(null);

  const byId = useMemo(() => new Map(layout.nodes.map((n) => [n.id, n])), [layout]);
  const boxes = useMemo(() => edgeBoxes(layout), [layout]);
  const large = layout.nodes.length > CULL_THRESHOLD;

  const centreNode = useCallback(
    (id: string) => {
      const n = byId.get(id);
      if (n) setView(centreOn(nodeRect(n), Math.max(READABLE_SCALE, Math.min(1.5, view.k)), size.width, size.height));
    },
    [byId, setView, size, view.k],
  );

  const focusSeq = focus?.seq;
  const focusId = focus?.id;
  const lastFocus = useRef<number | null>(null);
  useEffect(() => {
    if (focusSeq === undefined || focusId === undefined || lastFocus.current === focusSeq) return;
    lastFocus.current = focusSeq;
    centreNode(focusId);
  }, [focusSeq, focusId, centreNode]);

  const fit = () => {
    const k = Math.max(
      0.02,
      Math.min(1.25, size.width / Math.max(1, layout.width), size.height / Math.max(1, layout.height)),
    );
    setView({ k, x: (size.width - layout.width * k) / 2, y: (size.height - layout.height * k) / 2 });
  };

  // Zoomed out on a large graph, nothing is readable: a canvas draws the overview instead of
  // thousands of SVG elements (which would block the page while React commits them).
  const overview = large && view.k < TEXT_SCALE;
  // Path strings are made when an edge is first drawn, not for all edges of a large graph at once.
  const paths = useMemo(() => ({ layout, d: new Map<string, string>() }), [layout]).d;
  const pathOf = (e: CfgLayout["edges"][number]) => {
    let d = paths.get(e.id);
    if (d === undefined) paths.set(e.id, (d = path(e.points) ?? ""));
    return d;
  };
  const visible = useMemo(() => {
    if (!large) return { nodes: layout.nodes, edges: layout.edges };
    if (overview) return { nodes: [], edges: [] };
    const r = visibleRect(view, size.width, size.height);
    return {
      nodes: layout.nodes.filter((n) => intersects(nodeRect(n), r)),
      edges: layout.edges.filter((e) => {
        const b = boxes.get(e.id);
        return !b || intersects(b, r);
      }),
    };
  }, [large, overview, layout, view, size, boxes]);
  const showText = !large || view.k >= TEXT_SCALE;

  const onKey = useCallback(
    (e: KeyboardEvent, node: PositionedNode) => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        onSelect(node);
      }
    },
    [onSelect],
  );
  const submitFind = (e: FormEvent) => {
    e.preventDefault();
    const err = onFind(findText);
    setFindError(err);
  };

  return (
    <div className="cfg">
      <div className="toolbar cfg-tools">
        <button type="button" onClick={() => zoomBy(1.25)} aria-label="Zoom in">
          +
        </button>
        <button type="button" onClick={() => zoomBy(0.8)} aria-label="Zoom out">
          −
        </button>
        <button type="button" onClick={fit}>
          Fit
        </button>
        <button type="button" onClick={() => entryId && centreNode(entryId)} disabled={!entryId}>
          Entry
        </button>
        <button type="button" onClick={onGoHottest} disabled={!hottestId}>
          Go to hottest block
        </button>
        <form className="find-block" onSubmit={submitFind} role="search" aria-label="Find a block">
          <input
            type="search"
            aria-label="Block address"
            placeholder="block address or +offset"
            value={findText}
            onChange={(e) => {
              setFindText(e.target.value);
              setFindError(null);
            }}
          />
          <button type="submit">Find</button>
          {findError && (
            <span className="error small" role="alert">
              {findError}
            </span>
          )}
        </form>
        <span className="toolbar-label" id="scale-label">
          Colour scale
        </span>
        <div role="group" aria-labelledby="scale-label" className="segmented">
          {(["linear", "log"] as const).map((m) => (
            <button key={m} type="button" aria-pressed={legend.mode === m} onClick={() => onScaleMode(m)}>
              {m}
            </button>
          ))}
        </div>
        <span className="muted small">
          {formatCount(layout.nodes.filter((n) => n.kind === "block").length)} blocks · drag to pan, scroll to zoom
        </span>
      </div>
      <div className="cfg-stage">
        <svg ref={svgRef} className="cfg-svg" aria-label="Control-flow graph" role="img">
          <defs>
            {KINDS.map((k) => (
              <marker
                key={k}
                id={`arrow-${k}`}
                viewBox="0 0 10 10"
                refX="9"
                refY="5"
                markerWidth="10"
                markerHeight="10"
                markerUnits="userSpaceOnUse"
                orient="auto-start-reverse"
              >
                <path d="M 0 0 L 10 5 L 0 10 z" fill={EDGE_STYLE[k].stroke} />
              </marker>
            ))}
          </defs>
          <g ref={groupRef}>
            <g className="edges">
              {visible.edges.map((e) => (
                <path
                  key={e.id}
                  d={pathOf(e)}
                  fill="none"
                  stroke={EDGE_STYLE[e.kind].stroke}
                  strokeWidth={mEdges?.get(e.id)?.width ?? 1.4}
                  strokeDasharray={EDGE_STYLE[e.kind].dash}
                  markerEnd={`url(#arrow-${e.kind})`}
                  data-kind={e.kind}
                  data-edge={e.id}
                />
              ))}
            </g>
            {mEdges && showText && (
              <g className="edge-counts">
                {visible.edges.map((e) => {
                  const m = mEdges.get(e.id);
                  const mid = e.points[Math.floor(e.points.length / 2)];
                  if (!m || !mid) return null;
                  return (
                    <text
                      key={e.id}
                      x={mid.x + 6}
                      y={mid.y - 4}
                      className="edge-count"
                      data-testid="cfg-edge-count"
                      data-edge={e.id}
                      data-count={m.count}
                      data-label={m.label}
                    >
                      {formatCount(m.count)} · {m.label}
                    </text>
                  );
                })}
              </g>
            )}
            <g className="nodes">
              {visible.nodes.map((n) =>
                n.kind === "block" ? (
                  mBlocks && measured ? (
                    <BlockNode
                      key={n.id}
                      node={n}
                      fill={measured.colour(mBlocks.get(n.id)?.count ?? null)}
                      dark={measured.dark(mBlocks.get(n.id)?.count ?? null)}
                      selected={selected === n.id}
                      hot={hottestId === n.id}
                      showText={showText}
                      onSelect={onSelect}
                      onKey={onKey}
                      measured={mBlocks.get(n.id) ?? { count: null, label: "unknown" }}
                      unit={measured.overlay.unit}
                    />
                  ) : (
                    <BlockNode
                      key={n.id}
                      node={n}
                      fill={colour(n.samples)}
                      dark={dark(n.samples)}
                      selected={selected === n.id}
                      hot={hottestId === n.id}
                      showText={showText}
                      onSelect={onSelect}
                      onKey={onKey}
                    />
                  )
                ) : (
                  <ExitNode key={n.id} node={n} hostId={hostId} showText={showText} />
                ),
              )}
            </g>
          </g>
        </svg>
        {overview && <Overview layout={layout} colour={colour} view={view} size={size} />}
        <Minimap
          layout={layout}
          colour={colour}
          view={view}
          size={size}
          onNavigate={(x, y) => setView({ k: view.k, x: size.width / 2 - x * view.k, y: size.height / 2 - y * view.k })}
        />
      </div>
      <div className="legends">
        <ul className="legend" aria-label="Edge kinds">
          {KINDS.map((k) => (
            <li key={k}>
              <svg width="34" height="10" aria-hidden="true">
                <line
                  x1="1"
                  y1="5"
                  x2="33"
                  y2="5"
                  stroke={EDGE_STYLE[k].stroke}
                  strokeWidth="2"
                  strokeDasharray={EDGE_STYLE[k].dash}
                />
              </svg>{" "}
              {EDGE_STYLE[k].label}
            </li>
          ))}
        </ul>
        {measured ? <MeasurementLegend measured={measured} /> : <ColourLegend colour={colour} legend={legend} />}
      </div>
    </div>
  );
});

interface BlockNodeProps {
  node: PositionedNode;
  fill: string;
  dark: boolean;
  selected: boolean;
  hot: boolean;
  showText: boolean;
  onSelect: (n: PositionedNode) => void;
  onKey: (e: KeyboardEvent, n: PositionedNode) => void;
  /** A measurement's count for the block, shown instead of its samples. */
  measured?: OverlayBlock;
  unit?: string;
}

const BlockNode = memo(function BlockNode({
  node: n,
  fill,
  dark,
  selected,
  hot,
  showText,
  onSelect,
  onKey,
  measured,
  unit,
}: BlockNodeProps) {
  const count = measured
    ? measured.count === null
      ? "no data"
      : `${formatCount(measured.count)} ${unit} · ${measured.label}`
    : n.samples === null
      ? "samples unavailable"
      : n.samples === 0
        ? "no samples"
        : n.samples === 1
          ? "1 sample"
          : `${formatCount(n.samples)} samples`;
  // A measured count with its unit and label can outgrow a block sized for its address: squeeze it in.
  const fits = (count.length + 1) * 6.6 <= n.width - 8;
  return (
    <g
      data-testid="cfg-block"
      data-offset={n.block?.offset}
      data-measured={measured ? (measured.count ?? "none") : undefined}
      className={`cfg-node block${selected ? " selected" : ""}${dark ? " dark" : ""}${hot ? " hottest" : ""}`}
      transform={`translate(${n.x - n.width / 2},${n.y - n.height / 2})`}
      tabIndex={0}
      onClick={() => onSelect(n)}
      onKeyDown={(e) => onKey(e, n)}
    >
      <title>{measured ? count : n.samples === null ? "samples unavailable" : `${n.samples} samples`}</title>
      <rect width={n.width} height={n.height} rx={3} fill={fill} />
      {showText &&
        n.lines.map((l, i) => (
          <text key={i} x={n.width / 2} y={8 + 15 * i + 11} textAnchor="middle" className={i === 0 ? "addr" : "sub"}>
            {i > 0 ? " " : ""}
            {l}
          </text>
        ))}
      {showText && (
        <text
          x={n.width / 2}
          y={8 + 15 * n.lines.length + 11}
          textAnchor="middle"
          className="count"
          textLength={fits ? undefined : n.width - 8}
          lengthAdjust="spacingAndGlyphs"
        >
          {" "}
          {count}
        </text>
      )}
    </g>
  );
});

function ExitNode({ node, hostId, showText }: { node: PositionedNode; hostId: string; showText: boolean }) {
  const shape = (
    <>
      <rect
        width={node.width}
        height={node.height}
        rx={node.kind === "return" ? node.height / 2 : 3}
        className={`exit exit-${node.kind}`}
      />
      {showText &&
        node.lines.map((l, i) => (
          <text key={i} x={node.width / 2} y={8 + 15 * i + 11} textAnchor="middle" className={i === 0 ? "sub" : "addr"}>
            {l}
          </text>
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
  return (
    <g transform={transform} className="cfg-node exit-node">
      {shape}
    </g>
  );
}

function ColourLegend({ colour, legend }: { colour: (s: number | null) => string; legend: ColourLegendInfo }) {
  if (!legend.samplesKnown) return <p className="muted small">Block colours: samples unavailable.</p>;
  if (legend.total === 0) {
    return (
      <div className="colour-legend" aria-label="Block colour: samples per block">
        <svg width="14" height="14" aria-hidden="true">
          <rect x="0" y="1" width="14" height="12" fill={NO_SAMPLES_FILL} stroke="#bbb" />
        </svg>
        <span className="small">no samples in {legend.rangeLabel}</span>
      </div>
    );
  }
  const stops = legendStops(legend.mode, legend.max, 7);
  return (
    <div className="colour-legend" aria-label="Block colour: samples per block">
      <span className="small">
        samples per block, {legend.rangeLabel} ({legend.mode}):
      </span>
      <svg width={20 + 6 * 22} height="14" aria-hidden="true">
        <rect x="0" y="1" width="14" height="12" fill={NO_SAMPLES_FILL} stroke="#bbb" />
        {stops.slice(1).map((v, i) => (
          <rect key={i} x={20 + i * 22} y="1" width="22" height="12" fill={colour(Math.max(1, v))} />
        ))}
      </svg>
      <span className="small">
        0 ·{" "}
        {stops
          .slice(1)
          .map((v) => formatCount(v))
          .join(" · ")}
      </span>
    </div>
  );
}

function MeasurementLegend({ measured }: { measured: MeasuredInfo }) {
  const { overlay, mode, max, colour } = measured;
  const stops = legendStops(mode, max, 7);
  const what =
    overlay.unit === "samples" ? "sampled PC counts (time in each block, not executions)" : "executions, exact";
  return (
    <div className="colour-legend measured-legend" aria-label="Measurement legend">
      <span className="small">
        Measurement {measured.measurementId}, {measured.rangeLabel}: block {what} ({mode}); edge width by count, edges{" "}
        {overlay.unit === "samples" ? "sampled estimates" : "derived from the block counts (exact or estimate)"}
      </span>
      <svg width={20 + 20 + 6 * 22} height="14" aria-hidden="true">
        <rect x="0" y="1" width="14" height="12" fill={NO_DATA_FILL} stroke="#888" />
        <rect x="20" y="1" width="14" height="12" fill={NO_SAMPLES_FILL} stroke="#bbb" />
        {stops.slice(1).map((v, i) => (
          <rect key={i} x={40 + i * 22} y="1" width="22" height="12" fill={colour(Math.max(1, v))} />
        ))}
      </svg>
      <span className="small">
        no data · 0 ·{" "}
        {stops
          .slice(1)
          .map((v) => formatCount(v))
          .join(" · ")}
      </span>
      {overlay.notes.length > 0 && (
        <ul className="small" aria-label="Measured edges not drawn">
          {overlay.notes.map((n, i) => (
            <li key={i} data-node={n.node}>
              {/^b\d+$/.test(n.node) ? `+0x${Number(n.node.slice(1)).toString(16)}` : n.node}: {n.text}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
