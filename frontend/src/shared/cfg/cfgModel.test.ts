// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { sampleDetail, block, succ } from "../../test/fixtures";
import {
  blockSamplesMap,
  buildCfgModel,
  edgeKind,
  instructionsOfBlock,
  layoutCfg,
  NO_SAMPLES_FILL,
  sampleColour,
} from "./cfgModel";

describe("CFG model", () => {
  it("makes one node per basic block, labelled with its hex address and size", () => {
    const model = buildCfgModel(sampleDetail(), null);
    const blocks = model.nodes.filter((n) => n.kind === "block");
    expect(blocks.map((n) => n.id)).toEqual(["b0", "b16", "b24", "b48"]);
    expect(blocks[0].lines).toEqual(["0xffffffff81234560", "size 16"]);
    expect(blocks[0].addressHex).toBe("ffffffff81234560");
    expect(blocks.every((n) => n.samples === null)).toBe(true);
  });

  it("types edges by successor kind and routes exits to exit nodes", () => {
    const model = buildCfgModel(sampleDetail(), null);
    const edges = model.edges.map((e) => `${e.source}->${e.target}:${e.kind}`);
    expect(edges).toEqual([
      "b0->b16:fallthrough",
      "b16->b24:fallthrough",
      "b16->b48:taken",
      "b24->exit:tail_call:ffffffff81230000:tail_call",
      "b24->exit:indirect:24:indirect",
      "b48->exit:return:return",
    ]);
    const tail = model.nodes.find((n) => n.kind === "tail_call");
    expect(tail).toMatchObject({ functionId: 9, lines: ["tail call", "rw_verify_area"] });
    expect(model.nodes.filter((n) => n.kind === "return")).toHaveLength(1);
  });

  it("shares one return exit and sends branches outside the function to an external node", () => {
    const detail = sampleDetail();
    detail.blocks = [
      block(0, 4, [succ("taken", 0x400, { target_address_hex: "ffffffff81234960" }), succ("fallthrough", 4)]),
      block(4, 4, [succ("return", null)]),
      block(8, 4, [succ("return", null), succ("weird_kind", 4)]),
    ];
    const model = buildCfgModel(detail, null);
    expect(model.nodes.filter((n) => n.kind === "return")).toHaveLength(1);
    expect(model.nodes.find((n) => n.kind === "external")?.lines).toEqual(["leaves function", "0xffffffff81234960"]);
    expect(model.edges.find((e) => e.source === "b8" && e.target === "b4")?.kind).toBe("other");
    expect(edgeKind("taken")).toBe("taken");
  });

  it("colours blocks by samples: domain up to the hottest block, neutral for none", () => {
    const model = buildCfgModel(
      sampleDetail(),
      blockSamplesMap([
        { offset: 0, samples: 3 },
        { offset: 0x30, samples: 12 },
      ]),
    );
    expect(model.maxSamples).toBe(12);
    expect(model.nodes.find((n) => n.id === "b16")?.samples).toBe(0);
    const colour = sampleColour(model.maxSamples);
    expect(colour(0)).toBe(NO_SAMPLES_FILL);
    expect(colour(null)).toBe(NO_SAMPLES_FILL);
    expect(colour(12)).not.toBe(colour(3));
    expect(colour(12)).toMatch(/^rgb/);
  });

  it("lays out top to bottom with the entry block on the first rank", () => {
    const layout = layoutCfg(buildCfgModel(sampleDetail(), null));
    const entry = layout.nodes.find((n) => n.id === "b0")!;
    expect(layout.nodes).toHaveLength(7);
    for (const n of layout.nodes) {
      expect(Number.isFinite(n.x) && Number.isFinite(n.y)).toBe(true);
      if (n.id !== "b0") expect(n.y).toBeGreaterThan(entry.y);
    }
    expect(layout.edges.every((e) => e.points.length >= 2)).toBe(true);
    expect(layout.width).toBeGreaterThan(0);
    expect(layout.height).toBeGreaterThan(0);
  });

  it("picks the instructions inside a block's byte range", () => {
    const ins = [0, 3, 7, 16, 20].map((offset) => ({ offset }));
    expect(instructionsOfBlock(ins, block(0, 16, [])).map((i) => i.offset)).toEqual([0, 3, 7]);
    expect(instructionsOfBlock(ins, block(16, 8, [])).map((i) => i.offset)).toEqual([16, 20]);
  });
});
