// SPDX-License-Identifier: Apache-2.0
// Viewing a laid-out CFG: the first view (readable labels, centred on the entry and the hottest
// region), the part of the graph inside the viewport (large graphs draw only that), the hottest block,
// and the block that holds an address. Pure, so it is tested without a browser.
import { normalizeHex } from "../../lib/address";
import type { CfgLayout, PositionedNode } from "../../shared/cfg/cfgModel";

export interface View {
  k: number;
  x: number;
  y: number;
}

export interface Rect {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

/** Block labels are drawn at 11 px; at this scale they are still about 10 px on screen. */
export const READABLE_SCALE = 0.9;
export const MAX_SCALE = 4;
export const MIN_SCALE = 0.02;
/** Graphs with more nodes than this draw only what is in (or near) the viewport. */
export const CULL_THRESHOLD = 200;
/** Below this scale large graphs draw blocks without text (it could not be read anyway). */
export const TEXT_SCALE = 0.35;

export function nodeRect(n: PositionedNode): Rect {
  return { x0: n.x - n.width / 2, y0: n.y - n.height / 2, x1: n.x + n.width / 2, y1: n.y + n.height / 2 };
}

function union(a: Rect, b: Rect): Rect {
  return { x0: Math.min(a.x0, b.x0), y0: Math.min(a.y0, b.y0), x1: Math.max(a.x1, b.x1), y1: Math.max(a.y1, b.y1) };
}

/** The hottest block (most samples; the lowest offset among equals), or null when none has samples. */
export function hottestNode(nodes: readonly PositionedNode[]): PositionedNode | null {
  let best: PositionedNode | null = null;
  for (const n of nodes) {
    if (n.kind !== "block" || !n.samples) continue;
    if (!best || n.samples > (best.samples ?? 0)) best = n;
  }
  return best;
}

/** A view showing `rect` centred at scale k. */
export function centreOn(rect: Rect, k: number, vw: number, vh: number): View {
  const cx = (rect.x0 + rect.x1) / 2;
  const cy = (rect.y0 + rect.y1) / 2;
  return { k, x: vw / 2 - cx * k, y: vh / 2 - cy * k };
}

/** The first view: readable, showing the entry block and the hottest block together when both fit,
 *  else the hottest block (with samples) or the entry at the top; small graphs are shown whole. */
export function initialView(
  layout: CfgLayout,
  vw: number,
  vh: number,
  entryId: string | null,
  hottestId: string | null,
): View {
  const w = Math.max(1, layout.width);
  const h = Math.max(1, layout.height);
  const whole = Math.min(1.25, vw / w, vh / h);
  if (whole >= READABLE_SCALE) {
    return { k: whole, x: (vw - w * whole) / 2, y: (vh - h * whole) / 2 };
  }
  const k = READABLE_SCALE;
  const entry = layout.nodes.find((n) => n.id === entryId) ?? layout.nodes[0];
  const hot = hottestId ? layout.nodes.find((n) => n.id === hottestId) : undefined;
  // Never leave more than a little blank space above the top of the drawing.
  const noGapAbove = (v: View): View => ({ ...v, y: Math.min(v.y, 24) });
  if (hot && entry) {
    const both = union(nodeRect(entry), nodeRect(hot));
    const pad = 40;
    if ((both.x1 - both.x0 + 2 * pad) * k <= vw && (both.y1 - both.y0 + 2 * pad) * k <= vh)
      return noGapAbove(centreOn(both, k, vw, vh));
    return noGapAbove(centreOn(nodeRect(hot), k, vw, vh));
  }
  if (!entry) return { k, x: 0, y: 0 };
  const r = nodeRect(entry);
  // The entry at the top centre, with some room above it.
  return { k, x: vw / 2 - ((r.x0 + r.x1) / 2) * k, y: 24 - r.y0 * k };
}

/** The part of the drawing in the viewport, in layout coordinates, grown by `margin` screen pixels. */
export function visibleRect(v: View, vw: number, vh: number, margin = 200): Rect {
  return {
    x0: (-v.x - margin) / v.k,
    y0: (-v.y - margin) / v.k,
    x1: (vw - v.x + margin) / v.k,
    y1: (vh - v.y + margin) / v.k,
  };
}

export function intersects(a: Rect, b: Rect): boolean {
  return a.x0 <= b.x1 && b.x0 <= a.x1 && a.y0 <= b.y1 && b.y0 <= a.y1;
}

/** Bounding box of each edge's route. */
export function edgeBoxes(layout: CfgLayout): Map<string, Rect> {
  const out = new Map<string, Rect>();
  for (const e of layout.edges) {
    let r: Rect = { x0: Infinity, y0: Infinity, x1: -Infinity, y1: -Infinity };
    for (const p of e.points)
      r = { x0: Math.min(r.x0, p.x), y0: Math.min(r.y0, p.y), x1: Math.max(r.x1, p.x), y1: Math.max(r.y1, p.y) };
    out.set(e.id, r);
  }
  return out;
}

/** The block holding an address (hex, with or without 0x) or a "+0x1a" offset into the function. */
export function findBlock(nodes: readonly PositionedNode[], functionHex: string, query: string): PositionedNode | null {
  const q = query.trim().toLowerCase();
  if (!q) return null;
  let offset: bigint;
  try {
    if (q.startsWith("+")) offset = BigInt(q.slice(1).startsWith("0x") ? q.slice(1) : `0x${q.slice(1)}`);
    else {
      const hex = normalizeHex(q);
      if (!/^[0-9a-f]+$/.test(hex)) return null;
      offset = BigInt(`0x${hex}`) - BigInt(`0x${normalizeHex(functionHex)}`);
    }
  } catch {
    return null;
  }
  for (const n of nodes) {
    if (n.kind !== "block" || !n.block) continue;
    const start = BigInt(n.block.offset);
    if (offset >= start && offset < start + BigInt(n.block.size)) return n;
  }
  return null;
}
