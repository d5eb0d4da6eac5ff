// SPDX-License-Identifier: Apache-2.0
// Default second range of a comparison: the period of the same length just before the first.
import { resolveRange, type TimeRange } from "../../lib/timeRange";

export function previousPeriod(a: TimeRange, now: number = Date.now()): TimeRange {
  const r = resolveRange(a, now);
  const len = r.to.getTime() - r.from.getTime();
  return { kind: "absolute", from: new Date(r.from.getTime() - len), to: new Date(r.from.getTime()) };
}
