// SPDX-License-Identifier: Apache-2.0
// The two periods of a comparison and how a change reads. A is the baseline (the URL's from/to), B the
// comparison (b_from/b_to); every change is B − A, so a function that got hotter grows (+, "grew").
// Opened from a view's range, that range is what the user looks at: it becomes the comparison, and the
// baseline defaults to the period of the same length just before it.
import { resolveRange, type TimeRange } from "../../lib/timeRange";

export function previousPeriod(a: TimeRange, now: number = Date.now()): TimeRange {
  const r = resolveRange(a, now);
  const len = r.to.getTime() - r.from.getTime();
  return { kind: "absolute", from: new Date(r.from.getTime() - len), to: new Date(r.from.getTime()) };
}

/** The pinned periods of a comparison: with no comparison range yet, the page's range becomes the
 *  comparison and the baseline the period before it; relative ranges are pinned to `now`. */
export function pinComparison(
  range: TimeRange,
  bRange: TimeRange | null,
  now: number = Date.now(),
): { baseline: TimeRange & { kind: "absolute" }; comparison: TimeRange & { kind: "absolute" } } {
  if (bRange === null) {
    const comparison = { kind: "absolute" as const, ...resolveRange(range, now) };
    return { baseline: previousPeriod(comparison) as TimeRange & { kind: "absolute" }, comparison };
  }
  return {
    baseline: { kind: "absolute", ...resolveRange(range, now) },
    comparison: { kind: "absolute", ...resolveRange(bRange, now) },
  };
}

export type Direction = "grew" | "shrank" | "held";

/** A change from the baseline to the comparison (per second), as the table shows it. */
export function describeChange(
  baselinePerSec: number,
  comparisonPerSec: number,
  format: (v: number) => string,
): { change: number; direction: Direction; text: string } {
  const change = comparisonPerSec - baselinePerSec;
  const direction: Direction = change > 0 ? "grew" : change < 0 ? "shrank" : "held";
  const sign = direction === "grew" ? "+" : direction === "shrank" ? "−" : "";
  return { change, direction, text: `${sign}${format(Math.abs(change))}` };
}
