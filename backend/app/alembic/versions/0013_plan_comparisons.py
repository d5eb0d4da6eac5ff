# SPDX-License-Identifier: Apache-2.0
"""The interleaved before/after comparisons of installed plans (issue 17 item 5).

One row per ComparePlan command (the backend asks it of the agent: after an install with the guard on, or
when a user compares again): the windows as the backend checked them, the summary the backend computed
from them (the agent's own summary is kept only in `agent_detail`), and, for a guarded install, what the
guard did and why.

Revision ID: 0013_plan_comparisons
Revises: 0012_stack_block_versions
Create Date: 2026-11-26
"""

from alembic import op

revision = "0013_plan_comparisons"
down_revision = "0012_stack_block_versions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE plan_comparisons (
            id uuid PRIMARY KEY,
            plan_id uuid NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
            host_id text NOT NULL,
            command_id uuid NOT NULL,
            requested_by text NOT NULL,
            guard boolean NOT NULL DEFAULT false,
            pairs integer NOT NULL,
            window_seconds double precision NOT NULL,
            state varchar(16) NOT NULL CHECK (state IN ('running', 'done', 'failed')),
            error text,
            windows jsonb,
            summary jsonb,
            agent_detail jsonb,
            guard_action varchar(16) CHECK (guard_action IN ('reverted', 'kept')),
            guard_reason text,
            created_at timestamptz NOT NULL DEFAULT now(),
            finished_at timestamptz
        )""")
    op.execute("CREATE INDEX ix_plan_comparisons_plan ON plan_comparisons (plan_id, created_at)")
    op.execute("CREATE UNIQUE INDEX ux_plan_comparisons_command ON plan_comparisons (command_id)")


def downgrade() -> None:
    op.execute("DROP TABLE plan_comparisons")
