# SPDX-License-Identifier: Apache-2.0
"""A ten-minute rollup of the call stacks: per host, ten minutes, stack and (pid, command, CPU) its samples.

A flame graph of an hour read ~60 minute-rollup rows per stack and context (1.12M rows for the bench's
hour); whole ten minutes (UTC-aligned, date_bin from 2000-01-01) are now read from `stack_samples_10m`
(~6 rows per stack and context), the other whole minutes from `stack_samples_1m`, the edges from the raw rows
(app.storage.stacks). Kept in the same transactions as the minute rollup: by the rollup task from the
minutes it has just summed, by the ingest writer for stacks that arrive below the minute watermark.
Partitioned by hour like the raw stacks and the minute rollup, and dropped with them. The minute rollup
already stored is summed here.

Revision ID: 0011_stack_rollup_10m
Revises: 0010_stack_rollup
Create Date: 2026-11-26
"""

from datetime import UTC, datetime, timedelta

from alembic import op
from sqlalchemy import text

revision = "0011_stack_rollup_10m"
down_revision = "0010_stack_rollup"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE stack_samples_10m (
            host_id text NOT NULL, bucket timestamptz NOT NULL, stack_id bigint NOT NULL, pid integer NOT NULL,
            comm text NOT NULL, cpu integer NOT NULL, count bigint NOT NULL
        ) PARTITION BY RANGE (bucket)""")
    op.execute(
        "CREATE UNIQUE INDEX ux_stack_samples_10m ON stack_samples_10m (host_id, bucket, stack_id, pid, comm, cpu)"
    )
    bind = op.get_bind()
    oldest = bind.execute(
        text("SELECT least((SELECT min(ts) FROM stack_samples), (SELECT min(bucket) FROM stack_samples_1m))")
    ).scalar()
    now = datetime.now(UTC)
    t = (min(oldest, now) if oldest is not None else now).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    while t < now + timedelta(hours=3):
        op.execute(
            f"CREATE TABLE stack_samples_10m_p{t:%Y%m%d%H} PARTITION OF stack_samples_10m "
            f"FOR VALUES FROM ('{t.isoformat()}') TO ('{(t + timedelta(hours=1)).isoformat()}')"
        )
        t += timedelta(hours=1)
    op.execute("""
        INSERT INTO stack_samples_10m (host_id, bucket, stack_id, pid, comm, cpu, count)
        SELECT r.host_id, date_bin('10 minutes', r.bucket, TIMESTAMPTZ '2000-01-01 00:00:00+00'), r.stack_id, r.pid,
               r.comm, r.cpu, sum(r.count)
        FROM stack_samples_1m r GROUP BY 1, 2, 3, 4, 5, 6""")


def downgrade() -> None:
    op.execute("DROP TABLE stack_samples_10m")
