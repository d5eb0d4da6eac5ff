# SPDX-License-Identifier: Apache-2.0
"""Names shared by the series' writer, rollups and readers."""

# The additive values of one measurement row in one interval, in this order in measurement_points.vals
# and as columns of the rollups. Concurrency and per-call values are derived from them (wall_ns over the
# measured seconds, wall_ns and vtime_ns over count), so rollups stay exact sums.
SLOTS = (
    "count",
    "wall_ns",
    "vtime_ns",
    "cycles",
    "instructions",
    "icache_stall",
    "branch_mispredict",
    "exits",
    "samples",
)
SLOT = {name: i for i, name in enumerate(SLOTS)}
NSLOTS = len(SLOTS)
# measurement_points_* rows with this resource carry the measured seconds (and intervals, in `count`).
COVERAGE_RESOURCE = -1

# The per-interval sample counts of sample_intervals, summed as they are into sample_totals_1m/_1h.
TOTALS = (
    "total_samples",
    "user_samples",
    "unmapped_samples",
    "lost_samples",
    "dropped_samples",
    "idle_samples",
    "stack_samples",
    "stack_dropped_samples",
)

RAW_TABLES = ("sample_intervals", "measurement_points", "stack_samples")
ROLLUP_TABLES = (
    "sample_blocks_1m",
    "sample_blocks_1h",
    "sample_totals_1m",
    "sample_totals_1h",
    "measurement_points_1m",
    "measurement_points_1h",
    "stack_samples_1m",
    "stack_samples_10m",
    "sample_functions_1m",
    "sample_functions_10m",
    "sample_functions_1h",
    "sample_functions_10m_run",
    "stack_host_totals_1m",
    "stack_host_totals_10m",
)
# Call stacks summed per kernel-build group (migration 0020): what the fleet's flame graph reads. No host in
# their key, so they are not spread by host over database nodes (app.storage.nodes): each database keeps its
# own hosts' part; their partitions are kept as the other series tables' are.
GROUP_TABLES = ("stack_group_samples_1m", "stack_group_samples_10m")
SERIES_TABLES = (*RAW_TABLES, *ROLLUP_TABLES, *GROUP_TABLES)
# Per-function sums of the block rollups (migration 0016): what the fleet's hot code reads, so a request
# costs hosts x functions x buckets rows, not hosts x blocks x buckets.
FUNCTION_GRAINS = ("1m", "10m", "1h")
# Tables whose partitions follow the call stacks' retention rather than the raw or rollup one. The stacks'
# minute and ten-minute rollups are partitioned by hour like the raw stacks, so all go at once (and with
# them, in time, the definitions no row refers to).
STACK_ROLLUPS = (
    "stack_samples_1m",
    "stack_samples_10m",
    "stack_host_totals_1m",
    "stack_host_totals_10m",
    *GROUP_TABLES,
)
STACK_TABLES = ("stack_samples", *STACK_ROLLUPS)
HOURLY_TABLES = (*RAW_TABLES, *STACK_ROLLUPS)

# Measurement states, as stored (and as measurement_points.state numbers, the proto's values).
MEASUREMENT_STATES = {1: "armed", 2: "running", 3: "target_exited", 4: "stopped", 5: "failed"}
ENDED_STATES = ("target_exited", "stopped", "failed")
