// SPDX-License-Identifier: Apache-2.0
// Shapes a measurement's series for the chart off the main thread (a measurement may have hundreds of
// rows and buckets; the page never waits on it).
import { chartSeries, type ChartSeries } from "./measureModel";
import type { MeasurementSeries } from "../../api/types";

export interface SeriesRequest {
  id: number;
  series: MeasurementSeries;
  names: [number, string][];
  metric: "count" | "wall" | "vtime";
}

export interface SeriesReply {
  id: number;
  shaped: ChartSeries[];
}

self.onmessage = (ev: MessageEvent<SeriesRequest>) => {
  const { id, series, names, metric } = ev.data;
  (self as unknown as Worker).postMessage({
    id,
    shaped: chartSeries(series, new Map(names), metric),
  } satisfies SeriesReply);
};
