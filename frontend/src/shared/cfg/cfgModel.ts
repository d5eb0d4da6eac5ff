// SPDX-License-Identifier: Apache-2.0
// Shapes a function's basic blocks into the control-flow graph the console draws: one node per
// block, exit nodes for control leaving the function (returns, tail calls, indirect jumps,
// branches to other code), edges typed by successor kind, the colour scale over per-block sample
// counts, and the layered layout (cfgLayout.ts). Pure: the component only draws what this returns.
import { colourScale, NO_SAMPLES_FILL } from "./colourScale";
import type { Block, FunctionDetail } from "../../api/types";
import { addOffset, formatAddress } from "../../lib/address";
import {
  layeredLayout,
  type LayoutEdgeIn,
  type LayoutNodeIn,
  type LayoutProgress,
  type LayoutResult,
} from "./cfgLayout";

/** Above this many blocks each returning block gets its own return exit beside it: one shared exit
 *  would pull hundreds of edges across the whole graph. */
export const LARGE_GRAPH_BLOCKS = 150;
/** Blocks carry a third line for their sample count. */
export const COUNT_LINE_H = 15;

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
    const s = samples ? (samples.get(block.offset) ?? 0) : null;
    if (s !== null) maxSamples = Math.max(maxSamples, s);
    const node = addNode({
      id: `b${block.offset}`,
      kind: "block",
      block,
      addressHex: hex,
      samples: s,
      functionId: null,
      lines: [formatAddress(hex, block.address), `size ${block.size}`],
    });
    node.height += COUNT_LINE_H;
  }
  const large = blocks.length > LARGE_GRAPH_BLOCKS;

  for (const block of blocks) {
    const src = `b${block.offset}`;
    block.successors.forEach((succ, i) => {
      const kind = edgeKind(succ.kind);
      const inside = succ.target_offset !== null && succ.target_offset !== undefined && offsets.has(succ.target_offset);
      if ((kind === "fallthrough" || kind === "taken" || kind === "other") && inside) {
        addEdge(src, `b${succ.target_offset}`, kind);
        return;
      }
      const targetText =
        succ.target_name ??
        (succ.target_address_hex || succ.target_address != null
          ? formatAddress(succ.target_address_hex, succ.target_address)
          : null);
      if (kind === "return") {
        const id = large ? `exit:return:${block.offset}` : "exit:return";
        addNode({
          id,
          kind: "return",
          lines: ["return"],
          block: null,
          addressHex: null,
          samples: null,
          functionId: null,
        });
        addEdge(src, id, "return");
      } else if (kind === "indirect") {
        const id = `exit:indirect:${block.offset}`;
        addNode({
          id,
          kind: "indirect",
          lines: ["indirect jump"],
          block: null,
          addressHex: null,
          samples: null,
          functionId: null,
        });
        addEdge(src, id, "indirect");
      } else {
        // A tail call, or a branch whose target lies outside this function's blocks.
        const key = succ.target_address_hex ?? succ.target_name ?? `${block.offset}:${i}`;
        const nodeKind: NodeKind = kind === "tail_call" ? "tail_call" : "external";
        const id = `exit:${nodeKind}:${key}`;
        addNode({
          id,
          kind: nodeKind,
          block: null,
          addressHex: succ.target_address_hex ?? null,
          samples: null,
          functionId: succ.target_function_id ?? null,
          lines: [nodeKind === "tail_call" ? "tail call" : "leaves function", targetText ?? "unknown target"],
        });
        addEdge(src, id, kind);
      }
    });
  }
  return { nodes, edges, maxSamples };
}

export { NO_SAMPLES_FILL };

/** The linear colour scale over sample counts up to `maxSamples` (see colourScale.ts for the options). */
export function sampleColour(maxSamples: number): (samples: number | null) => string {
  return colourScale("linear", maxSamples);
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

/** Layered top-to-bottom layout (cfgLayout.ts); the entry block (lowest offset) is the first rank. */
export function layoutCfg(model: CfgModel, onProgress?: LayoutProgress): CfgLayout {
  const input = layoutInput(model);
  return assembleLayout(model, layeredLayout(input.nodes, input.edges, input.entry, {}, onProgress));
}

/** What the layout needs of a model: node sizes, weighted edges, the entry block. */
export function layoutInput(model: CfgModel): {
  nodes: LayoutNodeIn[];
  edges: LayoutEdgeIn[];
  entry: string | undefined;
} {
  return {
    nodes: model.nodes.map((n) => ({ id: n.id, width: n.width, height: n.height })),
    // Fallthrough is the straight-line path: weight it so it stays vertical.
    edges: model.edges.map((e) => ({
      id: e.id,
      source: e.source,
      target: e.target,
      weight: e.kind === "fallthrough" ? 4 : 1,
    })),
    entry: model.nodes.find((n) => n.kind === "block")?.id,
  };
}

/** The model with the layout's positions and routes. */
export function assembleLayout(
  model: CfgModel,
  result: Pick<LayoutResult, "width" | "height" | "positions" | "routes">,
): CfgLayout {
  const nodes = model.nodes.map((n) => ({ ...n, ...(result.positions.get(n.id) ?? { x: 0, y: 0 }) }));
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const edges = model.edges.map((e) => {
    const self = e.source === e.target ? byId.get(e.source) : undefined;
    if (self) return { ...e, points: selfLoop(self) };
    return { ...e, points: result.routes.get(e.id) ?? [] };
  });
  return { width: result.width, height: result.height, nodes, edges };
}

/** A block that branches to its own start (a spin loop): a loop out of and back into its right side. */
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
