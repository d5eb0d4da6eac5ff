# SPDX-License-Identifier: Apache-2.0
"""The time series' storage: partitions, rollups, the ingest writer and the range planner.

Only `app.storage.samples` (the series' one public module) and the server's maintenance tasks use this
package; routes never do. Layout (see the migration 0003 and docs/architecture.md):

- `sample_intervals` (raw): one row per host and metric interval, the interval's block counts in
  parallel arrays (function ids, block offsets, counts) next to its totals.
- `measurement_points` (raw): one row per measurement and interval; `resources` lists the rows with
  values and `vals` holds `len(SLOTS)` numbers per listed row (NULL where a metric has no value).
- Rollups per minute and per hour: `sample_blocks_*` (host, bucket, function, block, count),
  `sample_totals_*` (host, bucket, totals), `measurement_points_*` (measurement, bucket, resource, one
  column per slot; resource -1 carries the measured seconds of the bucket).

Raw tables are partitioned by hour, rollups by day; partitions are created ahead of time and dropped
whole when they pass the retention, so no retention pass ever scans rows.
"""
