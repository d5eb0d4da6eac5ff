// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import {
  DEFAULT_RANGE,
  formatDuration,
  formatRange,
  fromLocalInput,
  parseDuration,
  parseRange,
  rangeKey,
  rangeParams,
  rangeQuery,
  resolveRange,
  sameRange,
  toLocalInput,
} from "./timeRange";

describe("time ranges", () => {
  it("reads and writes relative ranges as now-N", () => {
    expect(parseRange("now-15m", "now")).toEqual({ kind: "relative", seconds: 900 });
    expect(parseRange("now-90s", null)).toEqual({ kind: "relative", seconds: 90 });
    expect(rangeParams({ kind: "relative", seconds: 3600 })).toEqual({ from: "now-1h", to: "now" });
    expect(parseDuration("2d")).toBe(172800);
    expect(parseDuration("0m")).toBeNull();
    expect(formatDuration(90)).toBe("90s");
    expect(parseRange("now-7d", "now")).toEqual({ kind: "relative", seconds: 86400 }); // capped at retention
  });

  it("reads absolute ranges from ISO instants or epoch milliseconds, and writes ISO", () => {
    const r = parseRange("2026-11-23T14:00:00Z", "2026-11-23T14:05:00Z");
    expect(r).toEqual({
      kind: "absolute",
      from: new Date("2026-11-23T14:00:00Z"),
      to: new Date("2026-11-23T14:05:00Z"),
    });
    expect(rangeParams(r)).toEqual({ from: "2026-11-23T14:00:00.000Z", to: "2026-11-23T14:05:00.000Z" });
    expect(
      parseRange(String(Date.parse("2026-11-23T14:00:00Z")), String(Date.parse("2026-11-23T14:00:10Z"))),
    ).toMatchObject({ kind: "absolute" });
    expect(sameRange(parseRange(rangeParams(r).from, rangeParams(r).to), r)).toBe(true);
  });

  it("falls back to the default for anything malformed, reversed or too long", () => {
    expect(parseRange(null, null)).toEqual(DEFAULT_RANGE);
    expect(parseRange("yesterday", "today")).toEqual(DEFAULT_RANGE);
    expect(parseRange("2026-11-23T14:05:00Z", "2026-11-23T14:00:00Z")).toEqual(DEFAULT_RANGE);
    expect(parseRange("2026-11-01T00:00:00Z", "2026-11-23T00:00:00Z")).toEqual(DEFAULT_RANGE);
    expect(parseRange("now-soon", "now")).toEqual(DEFAULT_RANGE);
  });

  it("asks the API for window_s or from/to, and keys caches by range", () => {
    expect(rangeQuery({ kind: "relative", seconds: 300 })).toEqual({ window_s: 300 });
    const abs = parseRange("2026-11-23T14:00:00Z", "2026-11-23T14:05:00Z");
    expect(rangeQuery(abs)).toEqual({ from: "2026-11-23T14:00:00.000Z", to: "2026-11-23T14:05:00.000Z" });
    expect(rangeKey(abs)).not.toBe(rangeKey({ kind: "relative", seconds: 300 }));
  });

  it("resolves relative ranges against now, and prints ranges for people", () => {
    const now = Date.parse("2026-11-23T14:00:00Z");
    expect(resolveRange({ kind: "relative", seconds: 60 }, now)).toEqual({
      from: new Date(now - 60_000),
      to: new Date(now),
    });
    expect(formatRange({ kind: "relative", seconds: 900 })).toBe("the last 15 min");
    expect(formatRange({ kind: "relative", seconds: 120 })).toBe("the last 2m");
    const local = new Date(2026, 10, 23, 14, 0, 5);
    expect(formatRange({ kind: "absolute", from: local, to: new Date(2026, 10, 23, 14, 5, 0) })).toBe(
      "2026-11-23 14:00:05 – 14:05:00",
    );
    expect(toLocalInput(local)).toBe("2026-11-23T14:00:05");
    expect(fromLocalInput("2026-11-23T14:00:05")).toEqual(local);
    expect(fromLocalInput("14:00")).toBeNull();
  });
});
