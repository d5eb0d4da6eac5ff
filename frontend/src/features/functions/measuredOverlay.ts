// SPDX-License-Identifier: Apache-2.0
// Shapes a measurement's counts for the CFG overlay: each block's count (exact executions or PC
// samples, null where the measurement has no data for it) keyed by its graph node, and each derived
// edge count keyed by the graph edge it belongs to, with a stroke width by count and a label saying
// how it was obtained. Edges the graph does not draw (the entry, flow into a block without a
// predecessor, the end of a block without successors) are kept as notes on their block. Pure, so it
// runs in a worker (measuredOverlay.worker.ts) and in unit tests alike.
import type { MeasurementCfg } from "../../api/types";

export type CountLabel = "exact" | "sampled" | "estimate" | "unknown";
export type EdgeLabel = "exact" | "estimate" | "sampled estimate";

export interface OverlayBlock {
  count: number | null;
  label: CountLabel;
}

export interface OverlayEdge {
  count: number;
  label: EdgeLabel;
  width: number;
}

export interface OverlayNote {
  node: string;
  text: string;
}

export interface MeasuredOverlay {
  blocks: [string, OverlayBlock][];
  edges: [string, OverlayEdge][];
  notes: OverlayNote[];
  /** The hottest block's count (the colour domain's observed top). */
  maxBlock: number;
  maxEdge: number;
  /** "executions" for exact block counts, "samples" for sampled ones. */
  unit: "executions" | "samples";
  basis: string;
}

export interface OverlayGraph {
  nodes: { id: string; kind: string; offset: number | null }[];
  edges: { id: string; source: string; kind: string }[];
}

export const MIN_EDGE_W = 1.4;
export const MAX_EDGE_W = 9;

/** Stroke width for an edge count: square root of its share of the busiest edge (area-like). */
export function edgeWidth(count: number, maxEdge: number): number {
  if (maxEdge <= 0 || count <= 0) return MIN_EDGE_W;
  return MIN_EDGE_W + (MAX_EDGE_W - MIN_EDGE_W) * Math.sqrt(count / maxEdge);
}

export function edgeLabel(label: string): EdgeLabel {
  if (label === "exact_derived") return "exact";
  if (label === "sampled_estimate") return "sampled estimate";
  return "estimate";
}

function countLabel(label: string | null | undefined): CountLabel {
  return label === "exact" || label === "sampled" || label === "estimate" ? label : "unknown";
}

export function shapeOverlay(graph: OverlayGraph, cfg: MeasurementCfg): MeasuredOverlay {
  const blockNode = new Map<number, string>();
  for (const n of graph.nodes) if (n.kind === "block" && n.offset !== null) blockNode.set(n.offset, n.id);
  const blocks: [string, OverlayBlock][] = [];
  let maxBlock = 0;
  for (const b of cfg.blocks) {
    const id = blockNode.get(b.offset);
    if (!id) continue;
    if (b.count !== null && b.count !== undefined) maxBlock = Math.max(maxBlock, b.count);
    blocks.push([id, { count: b.count ?? null, label: countLabel(b.label) }]);
  }
  // Graph edges by where they start and what they are: an exit edge has one per block and kind.
  const byKey = new Map<string, string>();
  for (const e of graph.edges) {
    if (!byKey.has(`${e.source}|${e.kind}`)) byKey.set(`${e.source}|${e.kind}`, e.id);
  }
  const maxEdge = cfg.edges.reduce((m, e) => Math.max(m, e.count), 0);
  const edges = new Map<string, OverlayEdge>();
  const notes: OverlayNote[] = [];
  for (const e of cfg.edges) {
    const label = edgeLabel(e.label);
    const from = e.from_offset !== null && e.from_offset !== undefined ? blockNode.get(e.from_offset) : undefined;
    const to = e.to_offset !== null && e.to_offset !== undefined ? blockNode.get(e.to_offset) : undefined;
    let id: string | undefined;
    if ((e.kind === "fallthrough" || e.kind === "taken") && from && to) id = `${from}->${to}:${e.kind}`;
    else if ((e.kind === "return" || e.kind === "tail_call" || e.kind === "indirect") && from)
      id = byKey.get(`${from}|${e.kind}`);
    if (id) {
      const prev = edges.get(id);
      const count = (prev?.count ?? 0) + e.count;
      edges.set(id, {
        count,
        label: prev && prev.label !== label ? "estimate" : label,
        width: edgeWidth(count, maxEdge),
      });
      continue;
    }
    const node = to ?? from;
    if (!node) continue;
    const what =
      e.kind === "entry"
        ? "entered"
        : e.kind === "indirect_in"
          ? "entered indirectly"
          : e.kind === "no_successor"
            ? "ends without successor"
            : e.kind.replace("_", " ");
    notes.push({ node, text: `${what} ${e.count.toLocaleString("en-US")} · ${label}` });
  }
  return {
    blocks,
    edges: [...edges],
    notes,
    maxBlock,
    maxEdge,
    unit: cfg.basis === "sampled" ? "samples" : "executions",
    basis: cfg.basis,
  };
}
