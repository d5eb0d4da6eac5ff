# SPDX-License-Identifier: Apache-2.0
"""A version per host and ten minutes of the call stacks' rollups, so readers may keep what a closed
block adds to a flame graph.

A ten-minute block below the minute watermark still changes when a late batch (an agent's spool sent
after a reconnect) is summed into it (app.storage.stacks.add_late). Every statement that writes a ten-minute
bucket of `stack_samples_10m` (the rollup task's, the writer's for late stacks; the minute rollup is written
in the same transactions, for the same buckets) also gives each bucket it wrote a new number from
`stack_block_version` in `stack_blocks`. A reader keeps a block's sums under (host, bucket, version) and uses
them only while that row is there and the block's rows are (retention drops partitions without writing).
Buckets summed before this revision have no row and are read from the rollups every time, as before.

Revision ID: 0012_stack_block_versions
Revises: 0011_stack_rollup_10m
Create Date: 2026-11-26
"""

from alembic import op

revision = "0012_stack_block_versions"
down_revision = "0011_stack_rollup_10m"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SEQUENCE stack_block_version")
    op.execute("""
        CREATE TABLE stack_blocks (
            host_id text NOT NULL, bucket timestamptz NOT NULL, version bigint NOT NULL,
            PRIMARY KEY (host_id, bucket)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE stack_blocks")
    op.execute("DROP SEQUENCE stack_block_version")
