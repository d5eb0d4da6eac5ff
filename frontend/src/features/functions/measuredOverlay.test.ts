// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { edgeWidth, MAX_EDGE_W, MIN_EDGE_W, shapeOverlay, type OverlayGraph } from "./measuredOverlay";
import type { MeasurementCfg } from "../../api/types";

// mx_branch's shape: b0 branches to b16 (taken) or falls through to b8; both reach b24, which returns.
const graph: OverlayGraph = {
  nodes: [
    { id: "b0", kind: "block", offset: 0 },
    { id: "b8", kind: "block", offset: 8 },
    { id: "b16", kind: "block", offset: 16 },
    { id: "b24", kind: "block", offset: 24 },
    { id: "b32", kind: "block", offset: 32 },
    { id: "exit:return", kind: "return", offset: null },
  ],
  edges: [
    { id: "b0->b8:fallthrough", source: "b0", kind: "fallthrough" },
    { id: "b0->b16:taken", source: "b0", kind: "taken" },
    { id: "b8->b24:fallthrough", source: "b8", kind: "fallthrough" },
    { id: "b16->b24:taken", source: "b16", kind: "taken" },
    { id: "b24->exit:return:return", source: "b24", kind: "return" },
  ],
};

function cfg(over: Partial<MeasurementCfg> = {}): MeasurementCfg {
  return {
    from: "2026-01-01T00:00:00Z",
    to: "2026-01-01T00:01:00Z",
    seconds: 60,
    function_row: 0,
    function_id: 1,
    function: "mx_branch",
    basis: "exact",
    intervals: 3,
    edge_intervals: 3,
    blocks: [
      { offset: 0, row: 1, count: 1000, label: "exact" },
      { offset: 8, row: 2, count: 750, label: "exact" },
      { offset: 16, row: 3, count: 250, label: "exact" },
      { offset: 24, row: 4, count: 1000, label: "exact" },
      { offset: 32, row: 5, count: 0, label: "exact" },
    ],
    edges: [
      { from_offset: null, to_offset: 0, kind: "entry", label: "exact_derived", count: 1000 },
      { from_offset: 0, to_offset: 8, kind: "fallthrough", label: "exact_derived", count: 750 },
      { from_offset: 0, to_offset: 16, kind: "taken", label: "exact_derived", count: 250 },
      { from_offset: 8, to_offset: 24, kind: "fallthrough", label: "exact_derived", count: 750 },
      { from_offset: 16, to_offset: 24, kind: "taken", label: "estimated", count: 250 },
      { from_offset: 24, to_offset: null, kind: "return", label: "exact_derived", count: 1000 },
    ],
    ...over,
  };
}

describe("shapeOverlay", () => {
  it("keys block counts by node and edge counts by the graph edge they belong to", () => {
    const o = shapeOverlay(graph, cfg());
    const blocks = new Map(o.blocks);
    expect(blocks.get("b8")).toEqual({ count: 750, label: "exact" });
    expect(blocks.get("b32")).toEqual({ count: 0, label: "exact" });
    const edges = new Map(o.edges);
    expect(edges.get("b0->b8:fallthrough")?.count).toBe(750);
    expect(edges.get("b0->b8:fallthrough")?.label).toBe("exact");
    expect(edges.get("b16->b24:taken")?.label).toBe("estimate");
    expect(edges.get("b24->exit:return:return")?.count).toBe(1000);
    expect(edges.get("b24->exit:return:return")?.width).toBe(MAX_EDGE_W);
    expect(edges.get("b0->b16:taken")!.width).toBeLessThan(edges.get("b0->b8:fallthrough")!.width);
    expect(o.notes).toEqual([{ node: "b0", text: "entered 1,000 · exact" }]);
    expect(o.unit).toBe("executions");
    expect(o.maxBlock).toBe(1000);
  });

  it("keeps no data apart from zero and labels sampled edges as sampled estimates", () => {
    const c = cfg({ basis: "sampled" });
    c.blocks[4] = { offset: 32, row: null, count: null, label: null };
    c.edges = c.edges.map((e) => ({ ...e, label: "sampled_estimate" }));
    const o = shapeOverlay(graph, c);
    expect(new Map(o.blocks).get("b32")).toEqual({ count: null, label: "unknown" });
    expect(new Set(o.edges.map(([, e]) => e.label))).toEqual(new Set(["sampled estimate"]));
    expect(o.unit).toBe("samples");
  });

  it("draws widths from the thinnest stroke up, by the square root of the share", () => {
    expect(edgeWidth(0, 100)).toBe(MIN_EDGE_W);
    expect(edgeWidth(25, 100)).toBeCloseTo(MIN_EDGE_W + (MAX_EDGE_W - MIN_EDGE_W) * 0.5);
  });
});
