// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { countCrossings, layeredLayout, type LayoutEdgeIn, type LayoutNodeIn } from "./cfgLayout";

const node = (id: string, width = 100, height = 40): LayoutNodeIn => ({ id, width, height });
const edge = (source: string, target: string, weight = 1): LayoutEdgeIn => ({
  id: `${source}->${target}`,
  source,
  target,
  weight,
});

/** A function-shaped graph: a chain of `n` blocks, each also branching a few blocks ahead, and loops back. */
function syntheticCfg(n: number): { nodes: LayoutNodeIn[]; edges: LayoutEdgeIn[] } {
  const nodes = Array.from({ length: n }, (_, i) => node(`b${i}`, 90 + (i % 5) * 10, 53));
  const edges: LayoutEdgeIn[] = [];
  for (let i = 0; i + 1 < n; i++) {
    edges.push(edge(`b${i}`, `b${i + 1}`, 4));
    if (i % 3 === 0 && i + 7 < n) edges.push(edge(`b${i}`, `b${i + 7}`));
    if (i % 11 === 5) edges.push(edge(`b${i}`, `b${i - 4}`));
  }
  return { nodes, edges };
}

function overlaps(r: ReturnType<typeof layeredLayout>, nodes: LayoutNodeIn[]): boolean {
  const boxes = nodes.map((n) => ({ ...r.positions.get(n.id)!, w: n.width, h: n.height }));
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i];
      const b = boxes[j];
      if (Math.abs(a.x - b.x) * 2 < a.w + b.w && Math.abs(a.y - b.y) * 2 < a.h + b.h) return true;
    }
  }
  return false;
}

describe("layered CFG layout", () => {
  it("puts the entry on top and every forward edge's target below its source", () => {
    const nodes = [node("entry"), node("a"), node("b"), node("join"), node("ret", 60, 30)];
    const edges = [
      edge("entry", "a", 4),
      edge("entry", "b"),
      edge("a", "join", 4),
      edge("b", "join"),
      edge("join", "ret"),
    ];
    const r = layeredLayout(nodes, edges, "entry");
    const y = (id: string) => r.positions.get(id)!.y;
    expect(y("entry")).toBeLessThan(y("a"));
    expect(y("a")).toBe(y("b"));
    expect(y("join")).toBeGreaterThan(y("a"));
    expect(y("ret")).toBeGreaterThan(y("join"));
    expect(r.ranks).toBe(4);
    expect(r.crossings).toBe(0);
    expect(overlaps(r, nodes)).toBe(false);
    // Routes run from the source's bottom edge to the target's top edge.
    const route = r.routes.get("entry->a")!;
    expect(route[0].y).toBe(y("entry") + 20);
    expect(route[route.length - 1].y).toBe(y("a") - 20);
  });

  it("breaks loops depth-first from the entry and routes back edges upwards", () => {
    const nodes = [node("entry"), node("head"), node("body"), node("exit")];
    const edges = [edge("entry", "head"), edge("head", "body", 4), edge("body", "head"), edge("head", "exit")];
    const r = layeredLayout(nodes, edges, "entry");
    const back = r.routes.get("body->head")!;
    expect(back[0].y).toBeLessThan(r.positions.get("body")!.y);
    expect(back[back.length - 1].y).toBeGreaterThan(r.positions.get("head")!.y);
    expect(back[0].y).toBeGreaterThan(back[back.length - 1].y);
  });

  it("threads long edges through dummy vertices and leaves self-loops to the caller", () => {
    const nodes = ["a", "b", "c", "d"].map((id) => node(id));
    const edges = [edge("a", "b"), edge("b", "c"), edge("c", "d"), edge("a", "d"), edge("c", "c")];
    const r = layeredLayout(nodes, edges, "a");
    expect(r.dummies).toBe(2);
    expect(r.routes.get("a->d")).toHaveLength(4);
    expect(r.routes.get("c->c")).toEqual([]);
  });

  it("keeps blocks apart and finite on a thousand-block function, deterministically", () => {
    const { nodes, edges } = syntheticCfg(1000);
    const r = layeredLayout(nodes, edges, "b0");
    expect(r.positions.size).toBe(1000);
    for (const p of r.positions.values()) expect(Number.isFinite(p.x) && Number.isFinite(p.y)).toBe(true);
    expect(overlaps(r, nodes)).toBe(false);
    expect(r.width).toBeGreaterThan(0);
    const again = layeredLayout(nodes, edges, "b0");
    expect([...again.positions.values()]).toEqual([...r.positions.values()]);
  });

  it("reports progress through its phases", () => {
    const phases: string[] = [];
    layeredLayout([node("a"), node("b")], [edge("a", "b")], "a", {}, (p) => phases.push(p));
    expect(phases[0]).toBe("ranking");
    expect(phases[phases.length - 1]).toBe("done");
  });

  it("counts crossings between two layers exactly", () => {
    // u0→v1 and u1→v0 cross once; u0→v0 and u1→v1 do not.
    const verts = [
      { order: 0, down: [3] },
      { order: 1, down: [2] },
      { order: 0, down: [] },
      { order: 1, down: [] },
    ];
    expect(
      countCrossings(
        [
          [0, 1],
          [2, 3],
        ],
        verts,
      ),
    ).toBe(1);
    const straight = [
      { order: 0, down: [2] },
      { order: 1, down: [3] },
      { order: 0, down: [] },
      { order: 1, down: [] },
    ];
    expect(
      countCrossings(
        [
          [0, 1],
          [2, 3],
        ],
        straight,
      ),
    ).toBe(0);
  });
});
