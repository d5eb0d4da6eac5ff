# SPDX-License-Identifier: Apache-2.0
"""Per-function rollups of the sampled blocks: per host, bucket and function, its samples and idle samples.

The fleet's hot code (issue 19) summed `sample_blocks_1m`/`_1h` over a group's hosts: one row per host,
bucket and sampled *block*, 1.8 million rows for an hour of a 600-host group read from the minute rollup.
`sample_functions_1m`, `_10m` and `_1h` hold the same sums per function, and the ten-minute grain
(UTC-aligned, date_bin from 2000-01-01, as the call stacks') lets an hour that is not a clock hour be
read from at most 18 minutes and 6 ten-minute buckets instead of 60 minutes. They are kept with the
block rollups (app.storage.series.rollups): by the rollup task from the minute and ten-minute rows it
has just summed, by the ingest writer for rows that arrive below the watermarks. Partitioned by day like
the other rollups, and dropped with them (the rollup retention). The block rollups already stored are
summed here.

Revision ID: 0016_function_rollups
Revises: 0015_token_replay
Create Date: 2026-11-27
"""

from datetime import UTC, datetime, timedelta

from alembic import op
from sqlalchemy import text

revision = "0016_function_rollups"
down_revision = "0015_token_replay"
branch_labels = None
depends_on = None

GRAINS = ("1m", "10m", "1h")
TEN = "date_bin('10 minutes', bucket, TIMESTAMPTZ '2000-01-01 00:00:00+00')"


def upgrade() -> None:
    for grain in GRAINS:
        op.execute(f"""
            CREATE TABLE sample_functions_{grain} (
                host_id text NOT NULL, bucket timestamptz NOT NULL, function_id bigint NOT NULL,
                count bigint NOT NULL, idle_count bigint NOT NULL DEFAULT 0
            ) PARTITION BY RANGE (bucket)""")
        op.execute(
            f"CREATE UNIQUE INDEX ux_sample_functions_{grain} ON sample_functions_{grain} "
            "(host_id, bucket, function_id)"
        )
    bind = op.get_bind()
    oldest = bind.execute(
        text("SELECT least((SELECT min(bucket) FROM sample_blocks_1m), (SELECT min(bucket) FROM sample_blocks_1h))")
    ).scalar()
    now = datetime.now(UTC)
    start = (min(oldest, now) if oldest is not None else now).astimezone(UTC)
    t = start.replace(hour=0, minute=0, second=0, microsecond=0)
    while t < now + timedelta(days=2):
        for grain in GRAINS:
            op.execute(
                f"CREATE TABLE sample_functions_{grain}_p{t:%Y%m%d} PARTITION OF sample_functions_{grain} "
                f"FOR VALUES FROM ('{t.isoformat()}') TO ('{(t + timedelta(days=1)).isoformat()}')"
            )
        t += timedelta(days=1)
    for grain, source, bucket in (
        ("1m", "sample_blocks_1m", "bucket"),
        ("10m", "sample_blocks_1m", TEN),
        ("1h", "sample_blocks_1h", "bucket"),
    ):
        op.execute(f"""
            INSERT INTO sample_functions_{grain} (host_id, bucket, function_id, count, idle_count)
            SELECT host_id, {bucket}, function_id, sum(count), sum(idle_count)
            FROM {source} GROUP BY 1, 2, 3""")


def downgrade() -> None:
    for grain in GRAINS:
        op.execute(f"DROP TABLE sample_functions_{grain}")
