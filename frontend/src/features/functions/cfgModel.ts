// SPDX-License-Identifier: Apache-2.0
// Shapes a function's basic blocks into the control-flow graph the console draws: one node per
// block, exit nodes for control leaving the function (returns, tail calls, indirect jumps,
// branches to other code), edges typed by successor kind, the colour scale over per-block sample
// counts, and the dagre layout. Pure: the component only draws what this returns.
import { Graph, layout } from "@dagrejs/dagre";
import { scaleSequential } from "d3-scale";
import { interpolateYlOrRd } from "d3-scale-chromatic";
import type { Block, FunctionDetail } from "../../api/types";
import { addOffset, formatAddress } from "../../lib/address";

/** Successor kinds the graph distinguishes; anything else the server sends is drawn as "other". */
export type EdgeKind = "fallthrough" | "taken" | "tail_call" | "indirect" | "return" | "other";

const KNOWN_KINDS = new Set<string>(["fallthrough", "taken", "tail_call", "indirect", "return"]);

export function edgeKind(kind: string): EdgeKind {
  return KNOWN_KINDS.has(kind) ? (kind as EdgeKind) : "other";
}

export type NodeKind = "block" | "return" | "tail_call" | "indirect" | "external";

export interface CfgNode {
  id: string;
  kind: NodeKind;
  /** Lines of the node's label; for blocks the first is the address, the second the size. */
  lines: string[];
  width: number;
  height: number;
  block: Block | null;
  /** Address of the block as hex digits (from the API's string, never from a JSON number). */
  addressHex: string | null;
  samples: number | null;
  /** For exits into another known function: its id, for a link. */
  functionId: number | null;
}

export interface CfgEdge {
  id: string;
  source: string;
  target: string;
  kind: EdgeKind;
}

export interface CfgModel {
  nodes: CfgNode[];
  edges: CfgEdge[];
  /** Upper end of the colour scale's domain: the hottest block's sample count (0 when none). */
  maxSamples: number;
}

const CHAR_W = 7.2;
const LINE_H = 15;
const PAD_X = 12;
const PAD_Y = 8;

function sizeFor(lines: string[]): { width: number; height: number } {
  const longest = Math.max(...lines.map((l) => l.length), 4);
  return { width: Math.ceil(longest * CHAR_W + 2 * PAD_X), height: lines.length * LINE_H + 2 * PAD_Y };
}

export function blockAddressHex(fnHex: string | null | undefined, block: Block): string | null {
  if (block.address_hex) return block.address_hex;
  if (fnHex) return addOffset(fnHex, block.offset);
  return null;
}

export function buildCfgModel(detail: FunctionDetail, samples: ReadonlyMap<number, number> | null): CfgModel {
  const nodes: CfgNode[] = [];
  const edges: CfgEdge[] = [];
  const byId = new Map<string, CfgNode>();
  const seenEdges = new Set<string>();
  const blocks = detail.blocks.slice().sort((a, b) => a.offset - b.offset);
  const offsets = new Set(blocks.map((b) => b.offset));
  let maxSamples = 0;

  const addNode = (n: Omit<CfgNode, "width" | "height">) => {
    const existing = byId.get(n.id);
    if (existing) return existing;
    const node = { ...n, ...sizeFor(n.lines) };
    byId.set(node.id, node);
    nodes.push(node);
    return node;
  };
  const addEdge = (source: string, target: string, kind: EdgeKind) => {
    const id = `${source}->${target}:${kind}`;
    if (seenEdges.has(id)) return;
    seenEdges.add(id);
    edges.push({ id, source, target, kind });
  };

  for (const block of blocks) {
    const hex = blockAddressHex(detail.function.address_hex, block);
    const s = samples ? samples.get(block.offset) ?? 0 : null;
    if (s !== null) maxSamples = Math.max(maxSamples, s);
    addNode({
      id: `b${block.offset}`, kind: "block", block, addressHex: hex, samples: s, functionId: null,
      lines: [formatAddress(hex, block.address), `size ${block.size}`],
    });
  }

  for (const block of blocks) {
    const src = `b${block.offset}`;
    block.successors.forEach((succ, i) => {
      const kind = edgeKind(succ.kind);
      const inside = succ.target_offset !== null && succ.target_offset !== undefined && offsets.has(succ.target_offset);
      if ((kind === "fallthrough" || kind === "taken" || kind === "other") && inside) {
        addEdge(src, `b${succ.target_offset}`, kind);
        return;
      }
      const targetText = succ.target_name ?? (succ.target_address_hex || succ.target_address != null
        ? formatAddress(succ.target_address_hex, succ.target_address) : null);
      if (kind === "return") {
        addNode({ id: "exit:return", kind: "return", lines: ["return"], block: null, addressHex: null, samples: null, functionId: null });
        addEdge(src, "exit:return", "return");
      } else if (kind === "indirect") {
        const id = `exit:indirect:${block.offset}`;
        addNode({ id, kind: "indirect", lines: ["indirect jump"], block: null, addressHex: null, samples: null, functionId: null });
        addEdge(src, id, "indirect");
      } else {
        // A tail call, or a branch whose target lies outside this function's blocks.
        const key = succ.target_address_hex ?? succ.target_name ?? `${block.offset}:${i}`;
        const nodeKind: NodeKind = kind === "tail_call" ? "tail_call" : "external";
        const id = `exit:${nodeKind}:${key}`;
        addNode({
          id, kind: nodeKind, block: null, addressHex: succ.target_address_hex ?? null, samples: null,
          functionId: succ.target_function_id ?? null,
          lines: [nodeKind === "tail_call" ? "tail call" : "leaves function", targetText ?? "unknown target"],
        });
        addEdge(src, id, kind);
      }
    });
  }
  return { nodes, edges, maxSamples };
}

export const NO_SAMPLES_FILL = "#eef0f3";

/** The colour scale over sample counts; zero or unknown counts get the neutral fill. */
export function sampleColour(maxSamples: number): (samples: number | null) => string {
  // Start the ramp above its near-white end so a single sample is still visibly warm.
  const scale = scaleSequential((t: number) => interpolateYlOrRd(0.15 + 0.85 * t)).domain([0, Math.max(1, maxSamples)]);
  return (samples) => (samples && samples > 0 ? scale(samples) : NO_SAMPLES_FILL);
}

export interface PositionedNode extends CfgNode {
  x: number;
  y: number;
}

export interface PositionedEdge extends CfgEdge {
  points: { x: number; y: number }[];
}

export interface CfgLayout {
  width: number;
  height: number;
  nodes: PositionedNode[];
  edges: PositionedEdge[];
}

/** Layered top-to-bottom layout; the entry block (lowest offset) is the first rank. */
export function layoutCfg(model: CfgModel): CfgLayout {
  const g = new Graph({ multigraph: true });
  g.setGraph({ rankdir: "TB", nodesep: 28, ranksep: 40, edgesep: 12, marginx: 20, marginy: 20 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of model.nodes) g.setNode(n.id, { width: n.width, height: n.height });
  for (const e of model.edges) {
    // Fallthrough is the straight-line path: weight it so it stays vertical.
    g.setEdge(e.source, e.target, { weight: e.kind === "fallthrough" ? 4 : 1, minlen: 1 }, e.id);
  }
  layout(g);
  const nodes = model.nodes.map((n) => {
    const p = g.node(n.id) as { x: number; y: number };
    return { ...n, x: p.x, y: p.y };
  });
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const edges = model.edges.map((e) => {
    const self = e.source === e.target ? byId.get(e.source) : undefined;
    if (self) return { ...e, points: selfLoop(self) };
    const label = g.edge({ v: e.source, w: e.target, name: e.id }) as { points?: { x: number; y: number }[] };
    return { ...e, points: label?.points ?? [] };
  });
  const graph = g.graph() as { width?: number; height?: number };
  return { width: graph.width ?? 0, height: graph.height ?? 0, nodes, edges };
}

/** A block that branches to its own start (a spin loop): a loop out of and back into its right side.
 *  (dagre routes self-edges through dummy points that can land away from the node.) */
function selfLoop(n: PositionedNode): { x: number; y: number }[] {
  const right = n.x + n.width / 2;
  const dy = n.height / 4;
  return [
    { x: right, y: n.y - dy },
    { x: right + 18, y: n.y - dy - 6 },
    { x: right + 26, y: n.y },
    { x: right + 18, y: n.y + dy + 6 },
    { x: right, y: n.y + dy },
  ];
}

/** Per-offset sample counts from the samples response. */
export function blockSamplesMap(blocks: readonly { offset: number; samples: number }[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const b of blocks) m.set(b.offset, b.samples);
  return m;
}

/** The instructions that belong to one block: those whose offset lies in the block's range. */
export function instructionsOfBlock<T extends { offset: number }>(all: readonly T[], block: Block): T[] {
  return all.filter((ins) => ins.offset >= block.offset && ins.offset < block.offset + block.size);
}
