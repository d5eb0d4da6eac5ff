# SPDX-License-Identifier: Apache-2.0
"""Running totals of the per-function ten minutes within their hour: `sample_functions_10m_run`.

The fleet's hot code of an hour summed each host's rows of every bucket of the range, and a host's ~190
functions of the hour appear again in each of its five ten-minute rows (docs/decisions.md, "Fleet hot code
from running totals"). A row of this table, (host, ten-minute bucket b), holds the host's sums of b's hour up
to and including b (function ids ascending, busy and idle samples, as the other per-function rollups), so a
span of ten minutes inside one hour is one row or the difference of two. Partitioned by day like the other
rollups and dropped with them; filled here from the ten-minute rows for every ten minutes wholly below the
minute watermark (the ones the rollup task and the ingest writer keep).

Revision ID: 0018_function_running_totals
Revises: 0017_function_rollup_arrays
Create Date: 2026-11-28
"""

from datetime import UTC, timedelta

from alembic import op
from sqlalchemy import text

revision = "0018_function_running_totals"
down_revision = "0017_function_rollup_arrays"
branch_labels = None
depends_on = None

TABLE = "sample_functions_10m_run"


def upgrade() -> None:
    bind = op.get_bind()
    op.execute(f"""
        CREATE TABLE {TABLE} (
            host_id text NOT NULL, bucket timestamptz NOT NULL, function_ids bigint[] NOT NULL,
            busy_counts bigint[] NOT NULL, idle_counts bigint[] NOT NULL
        ) PARTITION BY RANGE (bucket)""")
    op.execute(f"CREATE UNIQUE INDEX ux_{TABLE} ON {TABLE} (host_id, bucket)")
    # The same daily partitions as the ten-minute rows.
    parts = bind.execute(
        text("""
        SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = CAST('sample_functions_10m' AS regclass)""")
    ).all()
    for name, bound in parts:
        op.execute(f"CREATE TABLE {name.replace('sample_functions_10m', TABLE, 1)} PARTITION OF {TABLE} {bound}")
    wm_1m = bind.execute(text("SELECT watermark_1m FROM series_state WHERE name = 'rollups'")).scalar()
    if wm_1m is None:
        return
    wm_1m = wm_1m.astimezone(UTC)
    closed = wm_1m.replace(minute=wm_1m.minute // 10 * 10, second=0, microsecond=0)
    bind.execute(
        text(f"""
        INSERT INTO {TABLE} (host_id, bucket, function_ids, busy_counts, idle_counts)
        SELECT host_id, b, array_agg(f ORDER BY f), array_agg(bs ORDER BY f), array_agg(i ORDER BY f)
        FROM (SELECT r.host_id, c.b, u.f, sum(u.b)::bigint AS bs, sum(u.i)::bigint AS i
              FROM sample_functions_10m r, unnest(r.function_ids, r.busy_counts, r.idle_counts) AS u(f, b, i),
                   generate_series(r.bucket,
                                   least(date_bin('1 hour', r.bucket, TIMESTAMPTZ '2000-01-01 00:00:00+00')
                                         + interval '50 minutes', CAST(:last AS timestamptz)),
                                   interval '10 minutes') AS c(b)
              WHERE r.bucket <= CAST(:last AS timestamptz)
              GROUP BY 1, 2, 3) s
        GROUP BY 1, 2"""),
        {"last": closed - timedelta(minutes=10)},
    )


def downgrade() -> None:
    op.execute(f"DROP TABLE {TABLE}")
