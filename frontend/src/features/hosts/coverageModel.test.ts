// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { stripModel } from "./coverageModel";
import type { DataCoverage } from "../../api/types";

function timeline(covered: number[], gaps: DataCoverage["gaps"] = []): DataCoverage {
  const start = Date.parse("2026-11-23T10:00:00Z");
  return {
    start: new Date(start).toISOString(),
    end: new Date(start + covered.length * 10_000).toISOString(),
    bucket_s: 10,
    buckets: covered.map((ms, i) => ({ start: new Date(start + i * 10_000).toISOString(), covered_ms: ms })),
    gaps,
  };
}

describe("the time strip's model", () => {
  it("marks buckets with data, partial data and none, and the share covered", () => {
    const s = stripModel(timeline([10_000, 9_500, 4_000, 0]));
    expect(s.buckets.map((b) => b.coverage)).toEqual(["data", "data", "partial", "none"]);
    expect(s.buckets[2].x).toBeCloseTo(0.5);
    expect(s.coverage).toBeCloseTo((1 + 0.95 + 0.4 + 0) / 4);
  });

  it("places gaps on the axis, clipped to the period, and keeps a zero-length refusal visible", () => {
    const s = stripModel(
      timeline(
        [10_000, 0, 0, 10_000],
        [
          {
            id: 1,
            start: "2026-11-23T10:00:10Z",
            end: "2026-11-23T10:00:30Z",
            messages: 20,
            reason: "buffer full",
            source: "agent",
          },
          {
            id: 2,
            start: "2026-11-23T09:00:00Z",
            end: "2026-11-23T10:00:05Z",
            messages: 3,
            reason: "never arrived",
            source: "backend",
          },
          {
            id: 3,
            start: "2026-11-23T10:00:35Z",
            end: "2026-11-23T10:00:35Z",
            messages: 1,
            reason: "clock ahead",
            source: "backend",
          },
        ],
      ),
    );
    expect(s.gaps).toHaveLength(3);
    expect(s.gaps[0].x).toBeCloseTo(0.25);
    expect(s.gaps[0].width).toBeCloseTo(0.5);
    expect(s.gaps[1].x).toBe(0); // starts before the period: clipped to its start
    expect(s.gaps[1].width).toBeCloseTo(0.125);
    expect(s.gaps[2].width).toBeGreaterThan(0);
    expect(s.gaps[2].reason).toBe("clock ahead");
  });

  it("drops gaps entirely after the period", () => {
    const s = stripModel(
      timeline(
        [10_000],
        [
          {
            id: 1,
            start: "2026-11-23T11:00:00Z",
            end: "2026-11-23T11:00:10Z",
            messages: 1,
            reason: "later",
            source: "agent",
          },
        ],
      ),
    );
    expect(s.gaps).toHaveLength(0);
  });
});
