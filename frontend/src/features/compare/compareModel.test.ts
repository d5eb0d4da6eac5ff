// SPDX-License-Identifier: Apache-2.0
import { describe, expect, it } from "vitest";
import { previousPeriod } from "./compareModel";

describe("compare", () => {
  it("defaults range B to the period of the same length just before A", () => {
    const a = { kind: "absolute" as const, from: new Date("2026-11-23T14:00:00Z"), to: new Date("2026-11-23T14:05:00Z") };
    expect(previousPeriod(a)).toEqual({ kind: "absolute", from: new Date("2026-11-23T13:55:00Z"), to: new Date("2026-11-23T14:00:00Z") });
    const now = Date.parse("2026-11-23T14:00:00Z");
    expect(previousPeriod({ kind: "relative", seconds: 60 }, now)).toEqual({
      kind: "absolute", from: new Date(now - 120_000), to: new Date(now - 60_000),
    });
  });
});
