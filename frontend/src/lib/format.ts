// SPDX-License-Identifier: Apache-2.0
// Number and time formatting shared by the screens, kept compact for dense tables.

export function formatRate(perSec: number): string {
  if (!Number.isFinite(perSec)) return "unavailable";
  if (perSec === 0) return "0/s";
  if (perSec >= 100) return `${Math.round(perSec)}/s`;
  if (perSec >= 10) return `${perSec.toFixed(1)}/s`;
  return `${perSec.toFixed(2)}/s`;
}

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(n % 1024 === 0 ? 0 : 1)} KiB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MiB`;
}

export function formatShare(share: number): string {
  return `${(share * 100).toFixed(1)} %`;
}

export function formatCount(n: number): string {
  return n.toLocaleString("en-US");
}

/** "12 s ago", "5 min ago", or the local date and time for anything older than a day. */
export function formatAgo(iso: string | null | undefined, now: number = Date.now()): string {
  if (!iso) return "never";
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "unknown";
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(t).toLocaleString();
}

/** A change as a signed percentage: "+7.1%", "−2.0%". */
export function formatChange(x: number, digits = 1): string {
  return `${x >= 0 ? "+" : "−"}${Math.abs(x * 100).toFixed(digits)}%`;
}

/** A change with its interval: "+7.1% (95% interval +2.3% .. +11.9%)". */
export function formatChangeInterval(change: number, interval: readonly number[], confidence: number): string {
  const [lo = change, hi = change] = interval;
  return `${formatChange(change)} (${Math.round(confidence * 100)}% interval ${formatChange(lo)} .. ${formatChange(hi)})`;
}
