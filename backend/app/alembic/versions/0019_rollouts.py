# SPDX-License-Identifier: Apache-2.0
"""Staged roll-outs of an approved plan (issue 19, "Staged roll-out with guarded apply").

`rollouts` holds one roll-out of one approved plan over the hosts of its build: who asked, the label
filter and the wave sizes it was asked with, the guard's settings, and its state (running, paused,
halted, completed, reverting, reverted) with the reason of the last change. `rollout_hosts` holds its
hosts, each in one wave with the target it installs into, the per-host plan the roll-out made for it (the
approved plan itself on the plan's own host), and its state (pending, installing, comparing, installed,
reverted, skipped, failed) with the reason.

A per-host plan is a row of `plans` made by the roll-out from the approved one: same code and code hash,
same build id, approved by the approval it inherits (`derived_from` names the approved plan,
`rollout_id` the roll-out). The state machine lives in these rows, so a backend that restarts resumes
every running roll-out from them.

Revision ID: 0019_rollouts
Revises: 0018_function_running_totals
Create Date: 2026-11-28
"""

from alembic import op

revision = "0019_rollouts"
down_revision = "0018_function_running_totals"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE rollouts (
            id uuid PRIMARY KEY,
            plan_id uuid NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
            plan_host_id text NOT NULL,
            kind varchar(16) NOT NULL CHECK (kind IN ('kernel', 'process')),
            build_id text NOT NULL,
            code_sha256 varchar(64) NOT NULL,
            requested_by text NOT NULL,
            labels jsonb NOT NULL DEFAULT '{}'::jsonb,
            wave_sizes jsonb NOT NULL,
            settings jsonb NOT NULL,
            state varchar(16) NOT NULL
                CHECK (state IN ('running', 'paused', 'halted', 'completed', 'reverting', 'reverted')),
            reason text,
            wave integer NOT NULL DEFAULT 0,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            finished_at timestamptz
        )""")
    op.execute("CREATE INDEX ix_rollouts_created ON rollouts (created_at)")
    op.execute("CREATE INDEX ix_rollouts_plan ON rollouts (plan_id)")
    op.execute("""
        CREATE TABLE rollout_hosts (
            rollout_id uuid NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
            host_id text NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
            position integer NOT NULL,
            wave integer NOT NULL,
            target_id varchar(64) NOT NULL,
            plan_id uuid REFERENCES plans (id) ON DELETE SET NULL,
            state varchar(16) NOT NULL CHECK (state IN
                ('pending', 'installing', 'comparing', 'installed', 'reverted', 'skipped', 'failed')),
            reason text,
            offline_since timestamptz,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (rollout_id, host_id)
        )""")
    op.execute("CREATE INDEX ix_rollout_hosts_host ON rollout_hosts (host_id, state)")
    op.execute("""
        ALTER TABLE plans
            ADD COLUMN derived_from uuid REFERENCES plans (id) ON DELETE SET NULL,
            ADD COLUMN rollout_id uuid REFERENCES rollouts (id) ON DELETE SET NULL""")


def downgrade() -> None:
    op.execute("ALTER TABLE plans DROP COLUMN rollout_id, DROP COLUMN derived_from")
    op.execute("DROP TABLE rollout_hosts")
    op.execute("DROP TABLE rollouts")
