# SPDX-License-Identifier: Apache-2.0
"""A minute rollup of the call stacks: per host, minute, stack and (pid, command, CPU) its samples.

A flame graph of an hour read every interval's row of every stack (3600 rows per stack at 1 s); whole
minutes below the rollups' minute watermark are now read from `stack_samples_1m` (at most 60 rows per
stack and context), the edges of the range from the raw rows (app.storage.stacks). The rollup is kept like the
other minute rollups (app.storage.series.rollups): by the rollup task as minutes complete, and by the ingest
writer for stacks that arrive below the watermark. Partitioned by hour like the raw stacks, and dropped
with them (the stacks' retention). Stacks already stored below the watermark are summed here.

Revision ID: 0010_stack_rollup
Revises: 0009_measurement_refusals
Create Date: 2026-11-26
"""

from datetime import UTC, datetime, timedelta

from alembic import op
from sqlalchemy import text

revision = "0010_stack_rollup"
down_revision = "0009_measurement_refusals"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE stack_samples_1m (
            host_id text NOT NULL, bucket timestamptz NOT NULL, stack_id bigint NOT NULL, pid integer NOT NULL,
            comm text NOT NULL, cpu integer NOT NULL, count bigint NOT NULL
        ) PARTITION BY RANGE (bucket)""")
    op.execute(
        "CREATE UNIQUE INDEX ux_stack_samples_1m ON stack_samples_1m (host_id, bucket, stack_id, pid, comm, cpu)"
    )
    bind = op.get_bind()
    oldest = bind.execute(text("SELECT min(ts) FROM stack_samples")).scalar()
    now = datetime.now(UTC)
    t = (min(oldest, now) if oldest is not None else now).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    while t < now + timedelta(hours=3):
        op.execute(
            f"CREATE TABLE stack_samples_1m_p{t:%Y%m%d%H} PARTITION OF stack_samples_1m "
            f"FOR VALUES FROM ('{t.isoformat()}') TO ('{(t + timedelta(hours=1)).isoformat()}')"
        )
        t += timedelta(hours=1)
    op.execute("""
        INSERT INTO stack_samples_1m (host_id, bucket, stack_id, pid, comm, cpu, count)
        SELECT s.host_id, date_trunc('minute', s.ts), s.stack_id, u.pid, u.comm, u.cpu, sum(u.n)
        FROM stack_samples s, unnest(s.pids, s.comms, s.cpus, s.counts) AS u(pid, comm, cpu, n)
        WHERE s.ts < (SELECT watermark_1m FROM series_state WHERE name = 'rollups')
        GROUP BY 1, 2, 3, 4, 5, 6""")


def downgrade() -> None:
    op.execute("DROP TABLE stack_samples_1m")
