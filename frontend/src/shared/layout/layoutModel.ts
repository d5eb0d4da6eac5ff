// SPDX-License-Identifier: Apache-2.0
// Layout candidates' table model: the rows as the backend ranked them (app.domain.layout_candidates:
// weight × hot lines × jumps per 64 B × taken share; functions that cannot move last), sorted by a
// column on request, with the figures formatted and a null figure shown as a dash with its reason.
import type { LayoutCandidate } from "../../api/types";

export type LayoutSort = "rank" | "name" | "score" | "weight" | "hot_lines" | "hot_bytes" | "density" | "taken";

export interface LayoutRow {
  rank: number;
  item: LayoutCandidate;
  /** The share that weighs the score: of the host's samples (kernel), else of the measured instructions. */
  weight: number | null;
}

const value: Record<Exclude<LayoutSort, "rank" | "name">, (r: LayoutRow) => number | null> = {
  score: (r) => r.item.score,
  weight: (r) => r.weight,
  hot_lines: (r) => r.item.hot_lines,
  hot_bytes: (r) => r.item.hot_bytes,
  density: (r) => r.item.branch_density,
  taken: (r) => r.item.taken_share,
};

export function layoutRows(items: LayoutCandidate[]): LayoutRow[] {
  return items.map((item, i) => ({ rank: i + 1, item, weight: item.share ?? item.counted_share ?? null }));
}

/** The rows sorted by a column; nulls (figures the host cannot give) last in either direction, ties in
 *  the backend's rank. Sorting by rank gives the backend's order (descending: reversed). */
export function sortLayoutRows(rows: LayoutRow[], sort: LayoutSort, desc: boolean): LayoutRow[] {
  const dir = desc ? -1 : 1;
  return [...rows].sort((a, b) => {
    if (sort === "rank") return dir * (a.rank - b.rank);
    if (sort === "name") return dir * a.item.name.localeCompare(b.item.name) || a.rank - b.rank;
    const va = value[sort](a);
    const vb = value[sort](b);
    if (va === null || vb === null) return va === vb ? a.rank - b.rank : va === null ? 1 : -1;
    return dir * (va - vb) || a.rank - b.rank;
  });
}

/** A figure for a cell: a dash for null. */
export function figure(v: number | null | undefined, digits = 2): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  return v.toFixed(digits);
}

/** A share as a percentage, a dash for null. */
export function percent(v: number | null | undefined, digits = 1): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  return `${(v * 100).toFixed(digits)} %`;
}
