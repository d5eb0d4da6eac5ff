# SPDX-License-Identifier: Apache-2.0
"""The hosts' stack rollups read from their unique index alone: the count joins the index (INCLUDE).

A fleet flame graph narrowed by a label (`role=db`: 200 of a build's 600 hosts), a compare side of a few hosts
and a host's own flame graph read the per-host stack rollups by host and bucket through `ux_stack_samples_1m`
and `_10m`. The rows are stored in the order they were summed (bucket after bucket, every host's in each), the
index is host-major: each row read came from a heap page of its own. Measured on bench/fleet's database (1,000
hosts, 40 sampled blocks a minute): 150,841 ten-minute rows of 200 hosts read 132,829 heap pages; with the
count in the index, the same read is an index-only scan of 1,551 pages (once vacuum has marked the pages
all-visible, as autovacuum does for rows inserted and not updated since), and the statement took ~100 ms
instead of ~160 ms with every page cached, far less than that when the heap pages are not.

The unique index keeps its key (the upserts' ON CONFLICT target is unchanged); only the count is carried with
it. The rollups' upserts rarely update a row in place (HOT) anyway: the count is written once per minute row
and ten-minute row, and a late batch's update writes a new index entry either way (measured: 289 HOT updates of
50,077).

Revision ID: 0021_stack_counts_in_index
Revises: 0020_stack_group_rollups
Create Date: 2026-11-29
"""

from alembic import op

revision = "0021_stack_counts_in_index"
down_revision = "0020_stack_group_rollups"
branch_labels = None
depends_on = None

TABLES = ("stack_samples_1m", "stack_samples_10m")
KEY = "host_id, bucket, stack_id, pid, comm, cpu"


def _replace(table: str, include: str) -> None:
    """Build the new unique index beside the old one (the upserts' target is never missing), drop the old,
    and give the new one the old one's name."""
    op.execute(f"CREATE UNIQUE INDEX ux_{table}_new ON {table} ({KEY}){include}")
    op.execute(f"DROP INDEX ux_{table}")
    op.execute(f"ALTER INDEX ux_{table}_new RENAME TO ux_{table}")


def upgrade() -> None:
    for table in TABLES:
        _replace(table, " INCLUDE (count)")


def downgrade() -> None:
    for table in TABLES:
        _replace(table, "")
