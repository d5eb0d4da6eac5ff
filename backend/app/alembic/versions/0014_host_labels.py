# SPDX-License-Identifier: Apache-2.0
"""Host labels (issue 19, the fleet's first slice).

`agent_labels` are what the host's agent last reported in Hello (from its config file); `labels` are the
labels the fleet views group and filter by: the agent's, until an admin edits them (`labels_edited_by`
and `labels_edited_at` set), after which a Hello updates only `agent_labels`. A GIN index answers the
fleet's label filter (`labels @> '{"role": "db"}'`).

Revision ID: 0014_host_labels
Revises: 0013_plan_comparisons
Create Date: 2026-11-27
"""

from alembic import op

revision = "0014_host_labels"
down_revision = "0013_plan_comparisons"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        ALTER TABLE hosts
            ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'::jsonb,
            ADD COLUMN agent_labels jsonb NOT NULL DEFAULT '{}'::jsonb,
            ADD COLUMN labels_edited_by text,
            ADD COLUMN labels_edited_at timestamptz""")
    op.execute("CREATE INDEX ix_hosts_labels ON hosts USING gin (labels jsonb_path_ops)")
    op.execute("CREATE INDEX ix_hosts_kernel_build ON hosts (kernel_release, kernel_build_id)")


def downgrade() -> None:
    op.execute("DROP INDEX ix_hosts_kernel_build")
    op.execute("DROP INDEX ix_hosts_labels")
    op.execute("""
        ALTER TABLE hosts DROP COLUMN labels, DROP COLUMN agent_labels, DROP COLUMN labels_edited_by,
            DROP COLUMN labels_edited_at""")
