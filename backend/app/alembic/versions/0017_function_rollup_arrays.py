# SPDX-License-Identifier: Apache-2.0
"""The per-function rollups as one row per host and bucket: its functions' ids, busy (non-idle) samples and
idle samples as three arrays in function id order.

The fleet's hot code of a 600-host group over an hour read ~830,000 rows of `sample_functions_*` (one per
host, bucket and function), one buffer each, and the rows themselves were most of its cost
(docs/decisions.md, "Fleet hot code from arrays per host and bucket"). A host's functions of one bucket are
now one row: `function_ids` (ascending, each once), `busy_counts` and `idle_counts` (same length), keyed by
(host_id, bucket), so the same hour is ~9,000 rows whose arrays are unnested as they are summed (hot code
reads two of them: the busy samples are stored as such, not as all samples less the idle ones). Still
partitioned by day and dropped with the other rollups; the rows already stored are converted (and back on
downgrade).

Revision ID: 0017_function_rollup_arrays
Revises: 0016_function_rollups
Create Date: 2026-11-27
"""

from alembic import op
from sqlalchemy import text

revision = "0017_function_rollup_arrays"
down_revision = "0016_function_rollups"
branch_labels = None
depends_on = None

GRAINS = ("1m", "10m", "1h")


def _partitions(table: str) -> list[tuple[str, str]]:
    """The partitions of `table`: name and bound expression (FOR VALUES ...)."""
    query = text("""
        SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = CAST(:t AS regclass) ORDER BY 1""")
    return [(r[0], r[1]) for r in op.get_bind().execute(query, {"t": table})]


def _rebuild(grain: str, columns: str, index: str, fill: str) -> None:
    """Replace sample_functions_{grain} by a table of `columns` with the same partitions, filled by `fill`
    (a SELECT over the old table, renamed `old`)."""
    table = f"sample_functions_{grain}"
    parts = _partitions(table)
    op.execute(f"ALTER TABLE {table} RENAME TO {table}_old")
    for name, _bound in parts:
        op.execute(f"ALTER TABLE {name} RENAME TO {name}_old")
    op.execute(f"ALTER INDEX ux_{table} RENAME TO ux_{table}_old")
    op.execute(f"CREATE TABLE {table} ({columns}) PARTITION BY RANGE (bucket)")
    op.execute(f"CREATE UNIQUE INDEX ux_{table} ON {table} ({index})")
    for name, bound in parts:
        op.execute(f"CREATE TABLE {name} PARTITION OF {table} {bound}")
    op.execute(f"INSERT INTO {table} {fill.format(old=f'{table}_old')}")
    op.execute(f"DROP TABLE {table}_old")


def upgrade() -> None:
    for grain in GRAINS:
        _rebuild(
            grain,
            "host_id text NOT NULL, bucket timestamptz NOT NULL, function_ids bigint[] NOT NULL, "
            "busy_counts bigint[] NOT NULL, idle_counts bigint[] NOT NULL",
            "host_id, bucket",
            """SELECT host_id, bucket, array_agg(function_id ORDER BY function_id),
                      array_agg(count - idle_count ORDER BY function_id), array_agg(idle_count ORDER BY function_id)
               FROM {old} GROUP BY 1, 2""",
        )


def downgrade() -> None:
    for grain in GRAINS:
        _rebuild(
            grain,
            "host_id text NOT NULL, bucket timestamptz NOT NULL, function_id bigint NOT NULL, "
            "count bigint NOT NULL, idle_count bigint NOT NULL DEFAULT 0",
            "host_id, bucket, function_id",
            """SELECT o.host_id, o.bucket, u.f, u.b + u.i, u.i
               FROM {old} o, unnest(o.function_ids, o.busy_counts, o.idle_counts) AS u(f, b, i)""",
        )
