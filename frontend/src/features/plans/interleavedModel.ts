// SPDX-License-Identifier: Apache-2.0
// The interleaved before/after of an installed plan, shaped for the plan page: per pair of windows the
// share of the process's samples in the plan's code with the original code and with the plan installed
// (the dots of the chart, on D3 scales), and the change with its 95% interval in one sentence that says
// when the change is within noise. The figures are the backend's (it recomputes them from the windows);
// negative is good: less of the process's time in that code.
import { scaleLinear, scalePoint } from "d3-scale";
import type { CompareSummary, PlanInterleaved } from "../../api/types";
import { formatChange, formatChangeInterval } from "../../lib/format";

const share = (x: number) => `${(x * 100).toFixed(1)}%`;

/** "+7.1% (95% interval +2.3% .. +11.9%)", or null without an interval. */
export function changeText(s: CompareSummary | null | undefined): string | null {
  if (!s || s.change === null || !s.interval) return null;
  return formatChangeInterval(s.change, s.interval, s.confidence);
}

/** The sentence under the chart: what the comparison says, in words. */
export function verdictSentence(c: PlanInterleaved): string {
  if (c.state === "running") {
    return `Comparing with the original code: ${c.message || "starting"}`;
  }
  if (c.state === "failed") return `The comparison failed: ${c.error ?? "no reason given"}`;
  const s = c.summary;
  if (!s) return "The comparison has no summary.";
  const change = changeText(s);
  const shares =
    s.share_original !== null && s.share_installed !== null
      ? ` (${share(s.share_original)} of the samples with the original code, ${share(s.share_installed)} installed)`
      : "";
  switch (s.verdict) {
    case "insufficient":
      return `Too few usable pairs of windows (${s.pairs_used}) to measure a change: compare again with more or longer windows.`;
    case "within_noise":
      return `Within noise: the plan's code took ${change} of the process's samples${shares}; the interval includes no change, so the difference is not distinguishable from noise.`;
    case "faster":
      return `Faster: the plan's code took ${change} of the process's samples${shares}; the whole interval is below zero.`;
    case "slower":
      return `Slower: the plan's code took ${change} of the process's samples${shares}; the whole interval is above zero.`;
  }
}

export interface SharePoint {
  pair: number;
  arm: "original" | "installed";
  share: number;
  x: number;
  y: number;
  used: boolean;
}

export interface ShareChart {
  width: number;
  height: number;
  points: SharePoint[];
  /** One segment per pair with both shares, from its original to its installed dot. */
  links: { pair: number; x1: number; y1: number; x2: number; y2: number; up: boolean }[];
  ticks: { y: number; label: string }[];
  pairs: { pair: number; x: number }[];
}

/** The chart's geometry: pairs along x, shares along y (from 0), two dots per pair (original, installed). */
export function shareChart(c: Pick<PlanInterleaved, "pair_shares">, width = 420, height = 160): ShareChart {
  const margin = { left: 44, right: 12, top: 10, bottom: 22 };
  const pairs = c.pair_shares.map((p) => p.pair);
  const x = scalePoint<number>()
    .domain(pairs)
    .range([margin.left, width - margin.right])
    .padding(0.5);
  const values = c.pair_shares.flatMap((p) => [p.original, p.installed]).filter((v): v is number => v !== null);
  const top = Math.max(0.01, ...values);
  const y = scaleLinear()
    .domain([0, top])
    .nice(4)
    .range([height - margin.bottom, margin.top]);
  const offset = Math.min(6, x.step() / 6);
  const points: SharePoint[] = [];
  const links: ShareChart["links"] = [];
  for (const p of c.pair_shares) {
    const px = x(p.pair) ?? 0;
    const o = p.original,
      n = p.installed;
    if (o !== null) points.push({ pair: p.pair, arm: "original", share: o, x: px - offset, y: y(o), used: p.used });
    if (n !== null) points.push({ pair: p.pair, arm: "installed", share: n, x: px + offset, y: y(n), used: p.used });
    if (o !== null && n !== null) {
      links.push({ pair: p.pair, x1: px - offset, y1: y(o), x2: px + offset, y2: y(n), up: n > o });
    }
  }
  return {
    width,
    height,
    points,
    links,
    ticks: y.ticks(4).map((t) => ({ y: y(t), label: share(t) })),
    pairs: pairs.map((p) => ({ pair: p, x: x(p) ?? 0 })),
  };
}

/** The per-pair table's rows: shares and their difference in points of percent. */
export function pairRows(c: Pick<PlanInterleaved, "pair_shares">) {
  return c.pair_shares.map((p) => ({
    pair: p.pair + 1,
    original: p.original === null ? "no samples" : share(p.original),
    installed: p.installed === null ? "no samples" : share(p.installed),
    difference:
      p.original === null || p.installed === null
        ? "dropped"
        : `${formatChange(p.installed - p.original, 2).replace("%", " pt")}`,
  }));
}
