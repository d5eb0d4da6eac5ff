// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { block, sampleDetail, succ } from "../../test/fixtures";
import { buildCfgModel, blockSamplesMap, layoutCfg } from "../../shared/cfg/cfgModel";
import { READABLE_SCALE, findBlock, hottestNode, initialView, intersects, visibleRect } from "./cfgView";

function tallDetail(n: number) {
  const d = sampleDetail();
  d.blocks = Array.from({ length: n }, (_, i) =>
    block(i * 16, 16, i + 1 < n ? [succ("fallthrough", (i + 1) * 16)] : [succ("return", null)]),
  );
  return d;
}

describe("CFG view", () => {
  it("shows a small graph whole", () => {
    const layout = layoutCfg(buildCfgModel(sampleDetail(), null));
    const v = initialView(layout, 2000, 2000, "b0", null);
    expect(v.k).toBeGreaterThanOrEqual(READABLE_SCALE);
    expect(v.x).toBeGreaterThanOrEqual(0);
  });

  it("opens a large graph at a readable scale with the entry and the hottest block in view", () => {
    const d = tallDetail(60);
    const layout = layoutCfg(buildCfgModel(d, blockSamplesMap([{ offset: 0x30, samples: 9 }])));
    const vw = 800;
    const vh = 560;
    const inView = (id: string, v: ReturnType<typeof initialView>) => {
      const n = layout.nodes.find((x) => x.id === id)!;
      const sx = n.x * v.k + v.x;
      const sy = n.y * v.k + v.y;
      return sx > 0 && sx < vw && sy > 0 && sy < vh;
    };
    const hot = hottestNode(layout.nodes)!;
    expect(hot.id).toBe("b48");
    const v = initialView(layout, vw, vh, "b0", hot.id);
    expect(v.k).toBe(READABLE_SCALE);
    expect(inView("b0", v)).toBe(true);
    expect(inView("b48", v)).toBe(true);
    // Far apart: the hottest block is centred.
    const far = layoutCfg(buildCfgModel(d, blockSamplesMap([{ offset: 0x3a0, samples: 9 }])));
    const vf = initialView(far, vw, vh, "b0", "b928");
    expect(vf.k).toBe(READABLE_SCALE);
    const n = far.nodes.find((x) => x.id === "b928")!;
    expect(n.x * vf.k + vf.x).toBeCloseTo(vw / 2);
    expect(n.y * vf.k + vf.y).toBeCloseTo(vh / 2);
    // No samples: the entry at the top.
    const cold = initialView(layout, vw, vh, "b0", null);
    expect(inView("b0", cold)).toBe(true);
  });

  it("finds the block holding an address or an offset", () => {
    const layout = layoutCfg(buildCfgModel(sampleDetail(), null));
    expect(findBlock(layout.nodes, "ffffffff81234560", "0xffffffff81234573")?.id).toBe("b16");
    expect(findBlock(layout.nodes, "ffffffff81234560", "FFFFFFFF81234560")?.id).toBe("b0");
    expect(findBlock(layout.nodes, "ffffffff81234560", "+0x30")?.id).toBe("b48");
    expect(findBlock(layout.nodes, "ffffffff81234560", "+31")?.id).toBe("b48");
    expect(findBlock(layout.nodes, "ffffffff81234560", "0xffffffff81230000")).toBeNull();
    expect(findBlock(layout.nodes, "ffffffff81234560", "vfs_read")).toBeNull();
  });

  it("knows what lies in the viewport", () => {
    const r = visibleRect({ k: 2, x: -100, y: -50 }, 400, 300, 0);
    expect(r).toEqual({ x0: 50, y0: 25, x1: 250, y1: 175 });
    expect(intersects(r, { x0: 240, y0: 170, x1: 300, y1: 200 })).toBe(true);
    expect(intersects(r, { x0: 251, y0: 0, x1: 300, y1: 200 })).toBe(false);
    expect(hottestNode(layoutCfg(buildCfgModel(sampleDetail(), null)).nodes)).toBeNull();
  });
});
