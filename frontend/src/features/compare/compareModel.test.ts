// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { describeChange, pinComparison, previousPeriod } from "./compareModel";

describe("compare", () => {
  it("defaults range B to the period of the same length just before A", () => {
    const a = {
      kind: "absolute" as const,
      from: new Date("2026-11-23T14:00:00Z"),
      to: new Date("2026-11-23T14:05:00Z"),
    };
    expect(previousPeriod(a)).toEqual({
      kind: "absolute",
      from: new Date("2026-11-23T13:55:00Z"),
      to: new Date("2026-11-23T14:00:00Z"),
    });
    const now = Date.parse("2026-11-23T14:00:00Z");
    expect(previousPeriod({ kind: "relative", seconds: 60 }, now)).toEqual({
      kind: "absolute",
      from: new Date(now - 120_000),
      to: new Date(now - 60_000),
    });
  });
});

describe("baseline and comparison", () => {
  const now = Date.parse("2026-11-23T14:00:00Z");
  it("makes the page's range the comparison and the period before it the baseline", () => {
    const { baseline, comparison } = pinComparison({ kind: "relative", seconds: 300 }, null, now);
    expect(comparison).toEqual({ kind: "absolute", from: new Date(now - 300_000), to: new Date(now) });
    expect(baseline).toEqual({ kind: "absolute", from: new Date(now - 600_000), to: new Date(now - 300_000) });
    expect(baseline.to.getTime()).toBeLessThanOrEqual(comparison.from.getTime());
  });

  it("keeps given ranges, pinning relative ones", () => {
    const b = { kind: "absolute" as const, from: new Date(now - 60_000), to: new Date(now) };
    const { baseline, comparison } = pinComparison({ kind: "relative", seconds: 60 }, b, now);
    expect(baseline).toEqual({ kind: "absolute", from: new Date(now - 60_000), to: new Date(now) });
    expect(comparison).toEqual(b);
  });

  it("reads a function that got hotter in the comparison as growth", () => {
    const fmt = (v: number) => `${v}/s`;
    expect(describeChange(10, 43, fmt)).toEqual({ change: 33, direction: "grew", text: "+33/s" });
    expect(describeChange(43, 10, fmt)).toEqual({ change: -33, direction: "shrank", text: "−33/s" });
    expect(describeChange(5, 5, fmt)).toEqual({ change: 0, direction: "held", text: "0/s" });
  });
});
