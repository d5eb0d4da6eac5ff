// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
// The plan shaping on a real plan (hotpathd plan --json of the group fixture): grids, chains, strips.
import { describe, expect, it } from "vitest";
import fixture from "../../../../backend/tests/fixtures/plan_group.json";
import { exactCountsLabel, heatGrid, shapePlan, takenChange, type AgentPlan } from "./planModel";

describe("shapePlan", () => {
  it("shapes the I-cache grids, the chain table and the group's layout strips of a real plan", () => {
    const v = shapePlan(fixture as AgentPlan, false); // a JSON import's strings are not the schema's enums
    expect(v.status).toBe("ok");
    expect(v.before!.hotLines).toBe(fixture.icache_before.hot_lines);
    expect(v.before!.cells).toHaveLength(fixture.icache_before.cells.length);
    expect(v.after!.sets).toBe(64);
    expect(v.after!.columns).toBe(8);
    expect(v.members.map((m) => m.fn)).toEqual(fixture.group.map((g) => g.function));
    const chains = fixture.group.reduce((s, g) => s + g.chain_table.length, 0);
    expect(v.chains).toHaveLength(chains);
    expect(v.chains[0].weight).toBeGreaterThanOrEqual(v.chains[v.chains.length - 1].weight);
    // The fixture is made by this build's agent, which moves every member of the group fixture (its switch
    // table is rewritten); a function kept in place is shaped with its rule and detail.
    expect(v.kept).toHaveLength(fixture.kept_in_place.length);
    const kept = {
      function: "pr_table",
      address: "0x4711",
      rule: "indirect jump that is not a resolved switch table",
      detail: "at +0x1c",
    };
    const k = shapePlan({ ...fixture, kept_in_place: [kept] } as unknown as AgentPlan, false);
    expect(k.kept).toEqual([{ fn: "pr_table", address: "0x4711", rule: kept.rule, detail: kept.detail }]);
    expect(v.hexLines[0].startsWith(fixture.code.base)).toBe(true);
    // The agent's plans carry the emitted code as a listing (the fixture is made by this build's agent).
    expect(v.listing).toHaveLength(fixture.code.listing.length);
    expect(v.listing![0]).toEqual({
      address: fixture.code.listing[0].address,
      bytes: fixture.code.listing[0].bytes,
      text: fixture.code.listing[0].text,
      from: fixture.code.listing[0].from,
    });
    expect(v.verified).toBe(true);
    // Each member's block layout and taken branches (computed by the agent from the counts and the layout).
    expect(v.members.map((m) => m.blockLayout)).toEqual(fixture.group.map((g) => g.block_layout));
    expect(v.members[0].takenBefore).toBe(fixture.group[0].taken_branches_before);
    expect(v.members[0].takenAfter).toBe(fixture.group[0].taken_branches_after);
  });

  it("widens a grid past its ways where a set conflicts", () => {
    const g = heatGrid({
      sets: 2,
      ways: 2,
      line_bytes: 64,
      hot_lines: 3,
      max_lines_in_a_set: 3,
      minimum_lines: 2,
      distance_to_minimum: 1,
      ratio: 1.5,
      conflict_sets: 1,
      hot_bytes: 100,
      cells: [0, 1, 2].map((w) => ({ set: 0, way: w, line: "0x0", conflict: true, blocks: ["f+0x0"] })),
    });
    expect(g!.columns).toBe(3);
    expect(g!.cells.every((c) => c.conflict)).toBe(true);
  });
});

describe("exactCountsLabel", () => {
  const withSource = (source: string) => ({ ...fixture, profile: { ...fixture.profile, source } }) as AgentPlan;
  it("names inline counters, and the uprobes beside them, from the profile's source", () => {
    expect(exactCountsLabel(withSource("2 s of exact block counts (inline counters) in process 7"))).toBe(
      "exact (inline counters)",
    );
    expect(
      exactCountsLabel(
        withSource("2 s of exact block counts (inline counters) in process 7; uprobes in the same window for f (x)"),
      ),
    ).toBe("exact (inline counters; uprobes where a function cannot be counted inline)");
    expect(exactCountsLabel(withSource("2 s of exact block counts (uprobes) in process 7"))).toBe("exact (probes)");
  });
});

describe("takenChange", () => {
  it("gives both figures and the change, and no percentage from nothing", () => {
    expect(takenChange(77568.8, 49290.2)).toBe("77,569 → 49,290 (−36.5%)");
    expect(takenChange(100, 110)).toBe("100 → 110 (+10.0%)");
    expect(takenChange(0, 0)).toBe("0 → 0");
  });
});
