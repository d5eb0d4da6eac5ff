// SPDX-License-Identifier: Apache-2.0
// Shapes the timeline response for the stacked chart: per bucket, samples per second of kernel work
// (kernel minus idle), user code and the idle loop, stacked in that order. Pure.
import type { Timeline } from "../../api/types";

export const SERIES = [
  { key: "kernel", label: "kernel (not idle)", colour: "#e36209" },
  { key: "user", label: "user", colour: "#0969da" },
  { key: "idle", label: "idle", colour: "#c8ccd1" },
] as const;

export interface StackedRow {
  t: Date;
  values: [number, number, number];
  stack: [number, number][];
}

export function stackTimeline(data: Timeline): { rows: StackedRow[]; max: number } {
  let max = 0;
  const rows = data.points.map((p) => {
    const secs = p.seconds > 0 ? p.seconds : data.step_s;
    const kernel = Math.max(0, p.kernel - p.idle) / secs;
    const user = p.user / secs;
    const idle = p.idle / secs;
    const values: [number, number, number] = [kernel, user, idle];
    let acc = 0;
    const stack = values.map((v) => {
      const s: [number, number] = [acc, acc + v];
      acc += v;
      return s;
    });
    max = Math.max(max, acc);
    return { t: new Date(p.t), values, stack };
  });
  // Carry the last bucket to the end of its step so the step curve reaches the range's end.
  if (rows.length) {
    const last = rows[rows.length - 1];
    rows.push({ ...last, t: new Date(last.t.getTime() + data.step_s * 1000) });
  }
  return { rows, max };
}
