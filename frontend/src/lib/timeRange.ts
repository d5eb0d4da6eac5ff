// SPDX-License-Identifier: Apache-2.0
// Time ranges as every view uses them and as the URL carries them: relative ("the last 15 minutes",
// `from=now-15m&to=now`, moving with the host's newest samples) or absolute (`from` and `to` as ISO
// 8601 instants, a fixed window such as an incident). Pure: parsing, printing, and the API's query.

export type TimeRange = { kind: "relative"; seconds: number } | { kind: "absolute"; from: Date; to: Date };

export const PRESETS: { label: string; seconds: number }[] = [
  { label: "10 s", seconds: 10 },
  { label: "1 min", seconds: 60 },
  { label: "5 min", seconds: 300 },
  { label: "15 min", seconds: 900 },
  { label: "1 h", seconds: 3600 },
  { label: "6 h", seconds: 21600 },
  { label: "24 h", seconds: 86400 },
];

export const DEFAULT_RANGE: TimeRange = { kind: "relative", seconds: 60 };
/** The longest range the backend serves (its sample retention, by default). */
export const MAX_RANGE_S = 86400;

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };

/** "90s", "15m", "1h", "2d" → seconds; null when not a duration. */
export function parseDuration(text: string): number | null {
  const m = /^(\d+)([smhd])$/.exec(text.trim());
  if (!m) return null;
  const v = Number(m[1]) * UNITS[m[2]];
  return v > 0 ? v : null;
}

/** Seconds → the shortest exact duration text ("15m", "90s", "1h"). */
export function formatDuration(seconds: number): string {
  for (const u of ["d", "h", "m"] as const) if (seconds % UNITS[u] === 0) return `${seconds / UNITS[u]}${u}`;
  return `${seconds}s`;
}

function parseInstant(text: string): Date | null {
  if (/^\d{10,16}$/.test(text)) return new Date(Number(text)); // epoch milliseconds
  const t = Date.parse(text);
  return Number.isNaN(t) ? null : new Date(t);
}

/** A range from URL parameters; anything missing or malformed gives the default. */
export function parseRange(from: string | null, to: string | null): TimeRange {
  if (!from) return DEFAULT_RANGE;
  const rel = /^now-(.+)$/.exec(from);
  if (rel && (!to || to === "now")) {
    const s = parseDuration(rel[1]);
    return s ? { kind: "relative", seconds: Math.min(s, MAX_RANGE_S) } : DEFAULT_RANGE;
  }
  const a = parseInstant(from);
  const b = to ? parseInstant(to) : null;
  if (a && b && b.getTime() > a.getTime() && b.getTime() - a.getTime() <= MAX_RANGE_S * 1000) {
    return { kind: "absolute", from: a, to: b };
  }
  return DEFAULT_RANGE;
}

/** URL parameters of a range (inverse of parseRange). */
export function rangeParams(r: TimeRange): { from: string; to: string } {
  if (r.kind === "relative") return { from: `now-${formatDuration(r.seconds)}`, to: "now" };
  return { from: r.from.toISOString(), to: r.to.toISOString() };
}

export function sameRange(a: TimeRange, b: TimeRange): boolean {
  const pa = rangeParams(a);
  const pb = rangeParams(b);
  return pa.from === pb.from && pa.to === pb.to;
}

/** The API's query for a range: window_s for relative ranges, from/to for absolute ones. */
export function rangeQuery(r: TimeRange): { window_s: number } | { from: string; to: string } {
  return r.kind === "relative" ? { window_s: r.seconds } : { from: r.from.toISOString(), to: r.to.toISOString() };
}

/** A stable key for query caches. */
export function rangeKey(r: TimeRange): string {
  const p = rangeParams(r);
  return `${p.from}..${p.to}`;
}

function clock(d: Date, withDate: boolean): string {
  const pad = (n: number) => String(n).padStart(2, "0");
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return withDate ? `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}` : time;
}

/** "the last 15 min" or "2026-11-23 14:00:00 – 14:05:00" (local time). */
export function formatRange(r: TimeRange): string {
  if (r.kind === "relative") {
    const preset = PRESETS.find((p) => p.seconds === r.seconds);
    return `the last ${preset ? preset.label : formatDuration(r.seconds)}`;
  }
  const sameDay = r.from.toDateString() === r.to.toDateString();
  return `${clock(r.from, true)} – ${clock(r.to, !sameDay)}`;
}

/** The absolute interval a range means now (relative ranges end at `now`). */
export function resolveRange(r: TimeRange, now: number = Date.now()): { from: Date; to: Date } {
  if (r.kind === "absolute") return { from: r.from, to: r.to };
  return { from: new Date(now - r.seconds * 1000), to: new Date(now) };
}

/** `<input type="datetime-local">` text for a date (local time, seconds precision) and back. */
export function toLocalInput(d: Date): string {
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fromLocalInput(text: string): Date | null {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$/.test(text)) return null;
  const t = new Date(text).getTime();
  return Number.isNaN(t) ? null : new Date(t);
}
