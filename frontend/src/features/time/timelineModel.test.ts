// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { stackTimeline } from "./timelineModel";

describe("timeline model", () => {
  it("stacks kernel work, user and idle per second of each bucket, and extends the last bucket", () => {
    const { rows, max } = stackTimeline({
      from: "2026-01-01T00:00:00Z",
      to: "2026-01-01T00:00:04Z",
      seconds: 4,
      step_s: 2,
      points: [
        { t: "2026-01-01T00:00:00Z", seconds: 2, total: 200, user: 20, kernel: 180, idle: 100, unmapped: 0 },
        { t: "2026-01-01T00:00:02Z", seconds: 1, total: 100, user: 0, kernel: 100, idle: 100, unmapped: 0 },
      ],
    });
    expect(rows[0].values).toEqual([40, 10, 50]);
    expect(rows[0].stack).toEqual([
      [0, 40],
      [40, 50],
      [50, 100],
    ]);
    expect(rows[1].values).toEqual([0, 0, 100]); // a bucket with one sampled second is divided by one
    expect(rows).toHaveLength(3);
    expect(rows[2].t.toISOString()).toBe("2026-01-01T00:00:04.000Z");
    expect(max).toBe(100);
  });
});
