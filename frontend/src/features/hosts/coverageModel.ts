// SPDX-License-Identifier: Apache-2.0
// Shapes a host's timeline (coverage per bucket and recorded gaps) into the segments the time strip
// draws: each bucket is "data", "partial" or "none", and each gap becomes a span on the same axis,
// clipped to the period shown, with its reason.
import type { DataCoverage } from "../../api/types";

export type Coverage = "data" | "partial" | "none";

export interface StripBucket {
  x: number; // 0..1 along the axis
  width: number;
  coverage: Coverage;
  coveredMs: number;
}

export interface StripGap {
  x: number;
  width: number;
  reason: string;
  messages: number;
  source: "agent" | "backend";
  start: string;
  end: string;
}

export interface Strip {
  buckets: StripBucket[];
  gaps: StripGap[];
  coverage: number; // share of the period with data, 0..1
}

/** Buckets of at least 90 % are "data"; an interval straddling a bucket edge must not read as a hole. */
const FULL = 0.9;
/** A gap of zero length (one refused batch) still gets a visible mark. */
const MIN_GAP_WIDTH = 0.004;

export function stripModel(t: DataCoverage): Strip {
  const start = Date.parse(t.start);
  const end = Date.parse(t.end);
  const span = Math.max(1, end - start);
  const n = t.buckets.length || 1;
  const bucketMs = t.bucket_s * 1000;
  let covered = 0;
  const buckets = t.buckets.map((b, i) => {
    const share = Math.min(1, b.covered_ms / bucketMs);
    covered += share;
    const coverage: Coverage = share >= FULL ? "data" : share > 0 ? "partial" : "none";
    return { x: i / n, width: 1 / n, coverage, coveredMs: b.covered_ms };
  });
  const gaps = t.gaps
    .filter((g) => Date.parse(g.start) <= end && Date.parse(g.end) >= start)
    .map((g) => {
      const a = Math.max(start, Date.parse(g.start));
      const z = Math.min(end, Math.max(Date.parse(g.end), a));
      const x = (a - start) / span;
      return {
        x: Math.min(x, 1 - MIN_GAP_WIDTH),
        width: Math.max(MIN_GAP_WIDTH, (z - a) / span),
        reason: g.reason,
        messages: g.messages,
        source: g.source,
        start: g.start,
        end: g.end,
      };
    });
  return { buckets, gaps, coverage: covered / n };
}
