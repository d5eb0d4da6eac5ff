// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { MIN_DOMAIN, NO_SAMPLES_FILL, colourScale, isDarkFill, legendStops, niceMax, stickyMax } from "./colourScale";

describe("block colour scale", () => {
  it("rounds the domain up to 1, 2 or 5 × 10^k, never below the minimum", () => {
    expect(niceMax(0)).toBe(MIN_DOMAIN);
    expect(niceMax(1)).toBe(10);
    expect(niceMax(11)).toBe(20);
    expect(niceMax(376)).toBe(500);
    expect(niceMax(500)).toBe(500);
    expect(niceMax(501)).toBe(1000);
  });

  it("keeps the domain while the data stays inside it, so the legend does not rescale every second", () => {
    let max: number | null = null;
    const seen = [120, 80, 190, 60, 230].map((observed) => (max = stickyMax(max, observed)));
    expect(seen).toEqual([200, 200, 200, 200, 500]);
  });

  it("does not saturate at one sample, and shows nothing as the neutral fill", () => {
    const linear = colourScale("linear", niceMax(1));
    expect(linear(1)).not.toBe(linear(10));
    expect(linear(0)).toBe(NO_SAMPLES_FILL);
    expect(linear(null)).toBe(NO_SAMPLES_FILL);
    expect(isDarkFill("linear", 10, 1)).toBe(false);
    expect(isDarkFill("linear", 10, 9)).toBe(true);
  });

  it("spreads a log scale over decades, and its legend with it", () => {
    const log = colourScale("log", 1000);
    expect(log(1)).not.toBe(log(10));
    expect(log(10)).not.toBe(log(100));
    expect(log(1000)).toBe(log(5000)); // clamped at the top
    expect(legendStops("log", 1000, 4)).toEqual([1, 10, 100, 1000]);
    expect(legendStops("linear", 500, 6)).toEqual([0, 100, 200, 300, 400, 500]);
  });
});
