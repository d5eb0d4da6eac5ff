// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import type { PlanInterleaved } from "../../api/types";
import { changeText, pairRows, shareChart, verdictSentence } from "./interleavedModel";

function comparison(over: Partial<PlanInterleaved> = {}): PlanInterleaved {
  return {
    id: "c1",
    command_id: "k1",
    requested_by: "admin",
    guard: true,
    pairs: 3,
    window_seconds: 1,
    state: "done",
    progress: null,
    message: null,
    error: null,
    windows: [],
    pair_shares: [
      { pair: 0, original: 0.2, installed: 0.22, used: true },
      { pair: 1, original: 0.2, installed: 0.24, used: true },
      { pair: 2, original: null, installed: 0.3, used: false },
    ],
    summary: {
      share_original: 0.2,
      share_installed: 0.23,
      change: 0.071,
      interval: [0.023, 0.119],
      confidence: 0.95,
      verdict: "slower",
      pairs_used: 2,
    },
    guard_action: "reverted",
    guard_reason: "guard: …",
    created_at: "2026-11-26T17:00:00Z",
    finished_at: "2026-11-26T17:00:07Z",
    ...over,
  };
}

const noise = {
  share_original: 0.201,
  share_installed: 0.2,
  change: -0.004,
  interval: [-0.021, 0.013],
  confidence: 0.95,
  verdict: "within_noise" as const,
  pairs_used: 6,
};

describe("the interleaved comparison's sentence", () => {
  it("gives the change with its interval, signed", () => {
    expect(changeText(comparison().summary)).toBe("+7.1% (95% interval +2.3% .. +11.9%)");
    expect(changeText(noise)).toBe("−0.4% (95% interval −2.1% .. +1.3%)");
    expect(changeText({ ...noise, change: null, interval: null, verdict: "insufficient" })).toBeNull();
  });

  it("says when the change is within noise", () => {
    const s = verdictSentence(comparison({ summary: noise }));
    expect(s).toMatch(/^Within noise: the plan's code took −0\.4% \(95% interval −2\.1% \.\. \+1\.3%\)/);
    expect(s).toContain("20.1% of the samples with the original code, 20.0% installed");
    expect(s).toContain("not distinguishable from noise");
  });

  it("names slower, faster, too few pairs, a failure and progress", () => {
    expect(verdictSentence(comparison())).toMatch(/^Slower: .*\+7\.1%.*above zero\.$/);
    const faster = { ...noise, change: -0.09, interval: [-0.15, -0.03], verdict: "faster" as const };
    expect(verdictSentence(comparison({ summary: faster }))).toMatch(/^Faster: .*−9\.0%.*below zero\.$/);
    const few = { ...noise, change: null, interval: null, verdict: "insufficient" as const, pairs_used: 1 };
    expect(verdictSentence(comparison({ summary: few }))).toMatch(/^Too few usable pairs of windows \(1\)/);
    expect(verdictSentence(comparison({ state: "failed", summary: null, error: "not installed" }))).toBe(
      "The comparison failed: not installed",
    );
    expect(verdictSentence(comparison({ state: "running", summary: null, message: "pair 2/6: installed" }))).toBe(
      "Comparing with the original code: pair 2/6: installed",
    );
  });
});

describe("the interleaved comparison's chart and table", () => {
  it("places two dots per pair on a share scale from zero, and links the pairs with both", () => {
    const chart = shareChart(comparison(), 420, 160);
    expect(chart.points.map((p) => [p.pair, p.arm])).toEqual([
      [0, "original"],
      [0, "installed"],
      [1, "original"],
      [1, "installed"],
      [2, "installed"],
    ]);
    // y: 0 at the bottom (height - 22), higher shares higher up; the original left of its pair's installed.
    const [o0, n0] = chart.points;
    expect(n0.y).toBeLessThan(o0.y);
    expect(o0.x).toBeLessThan(n0.x);
    expect(chart.ticks[0]).toEqual({ y: 138, label: "0.0%" });
    expect(chart.links.map((l) => [l.pair, l.up])).toEqual([
      [0, true],
      [1, true],
    ]);
    expect(chart.points.find((p) => p.pair === 2)?.used).toBe(false);
    expect(chart.pairs.map((p) => p.pair)).toEqual([0, 1, 2]);
  });

  it("lists each pair's shares and their difference, a dropped pair as such", () => {
    expect(pairRows(comparison())).toEqual([
      { pair: 1, original: "20.0%", installed: "22.0%", difference: "+2.00 pt" },
      { pair: 2, original: "20.0%", installed: "24.0%", difference: "+4.00 pt" },
      { pair: 3, original: "no samples", installed: "30.0%", difference: "dropped" },
    ]);
  });
});
