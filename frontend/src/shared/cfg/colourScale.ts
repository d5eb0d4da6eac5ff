// SPDX-License-Identifier: Apache-2.0
// The block colour scale: sample counts over the chosen range, linear or logarithmic, over a domain
// that is a round number at least MIN_DOMAIN (one sample never saturates the ramp) and that only grows
// while the same function and range are shown (the legend does not rescale with every refresh).
// Zero and unknown counts get the neutral fill; the legend says "no samples" then.
import { scaleLog, scaleSequential } from "d3-scale";
import { interpolateYlOrRd } from "d3-scale-chromatic";

export type ScaleMode = "linear" | "log";
export const NO_SAMPLES_FILL = "#eef0f3";
/** A block the measurement has no data for (not a row, or no interval yet): unlike a zero count. */
export const NO_DATA_FILL = "#b8bec7";
/** The smallest top of the domain: a handful of samples stays in the light part of the ramp. */
export const MIN_DOMAIN = 10;

/** The smallest of 1, 2, 5 × 10^k at or above the observed maximum (and at least MIN_DOMAIN). */
export function niceMax(observed: number): number {
  const v = Math.max(MIN_DOMAIN, observed);
  const exp = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * exp >= v) return m * exp;
  return 10 * exp;
}

/** The domain top to use now: the previous one unless the data outgrew it. */
export function stickyMax(previous: number | null, observed: number): number {
  const next = niceMax(observed);
  return previous !== null && previous >= next ? previous : next;
}

const ramp = (t: number) => interpolateYlOrRd(0.12 + 0.88 * Math.max(0, Math.min(1, t)));

/** Colour of a block with `samples` on a scale whose domain ends at `max`. */
export function colourScale(mode: ScaleMode, max: number): (samples: number | null) => string {
  if (mode === "log") {
    const log = scaleLog()
      .domain([1, Math.max(2, max)])
      .range([0, 1])
      .clamp(true);
    return (s) => (s && s > 0 ? ramp(log(s)) : NO_SAMPLES_FILL);
  }
  const lin = scaleSequential(ramp)
    .domain([0, Math.max(1, max)])
    .clamp(true);
  return (s) => (s && s > 0 ? lin(s) : NO_SAMPLES_FILL);
}

/** Legend stops: values spread over the domain the way the scale spreads them. */
export function legendStops(mode: ScaleMode, max: number, count = 6): number[] {
  if (mode === "log") {
    const top = Math.max(2, max);
    return Array.from({ length: count }, (_, i) => Math.round(top ** (i / (count - 1))));
  }
  return Array.from({ length: count }, (_, i) => Math.round((max * i) / (count - 1)));
}

/** Text colour that stays readable on a fill of this share of the scale. */
export function isDarkFill(mode: ScaleMode, max: number, samples: number | null): boolean {
  if (!samples || samples <= 0) return false;
  const t = mode === "log" ? Math.log(samples) / Math.log(Math.max(2, max)) : samples / Math.max(1, max);
  return t > 0.55;
}
