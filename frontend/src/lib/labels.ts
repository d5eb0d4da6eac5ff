// SPDX-License-Identifier: Apache-2.0
// Host labels as the SRE types them in a filter ("role=db rack=r1"), checked as the backend checks them
// (app.protocol.labels): the fleet views and a roll-out's host filter read them so.

/** A label key as the backend accepts it (app.protocol.labels). */
export const LABEL_KEY_RE = /^[A-Za-z0-9._/-]{1,63}$/;

/** "role=db rack=r1" or "role=db, rack=r1" → ["role=db", "rack=r1"], or the first mistake. */
export function parseLabelFilter(text: string): { labels: string[]; error: string | null } {
  const parts = text
    .split(/[\s,]+/)
    .map((p) => p.trim())
    .filter((p) => p !== "");
  const labels: string[] = [];
  for (const p of parts) {
    const eq = p.indexOf("=");
    if (eq <= 0) return { labels: [], error: `"${p}" is not key=value` };
    const key = p.slice(0, eq);
    if (!LABEL_KEY_RE.test(key)) return { labels: [], error: `"${key}" is not a label key` };
    labels.push(p);
  }
  return { labels, error: null };
}

/** ["role=db", "rack=r1"] (as parseLabelFilter gives them) → { role: "db", rack: "r1" }. */
export function labelMap(labels: string[]): Record<string, string> {
  return Object.fromEntries(labels.map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]));
}
