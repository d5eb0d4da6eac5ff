# SPDX-License-Identifier: Apache-2.0
"""Code positioning plans and their approval workflow.

- plans: one row per plan a user asked an agent to make: the root asked for (catalog digest, function
  index, name), the planner options, the state (planning, ready, failed, cancelled; requested,
  approved, rejected, installing, installed, install_failed, reverting, reverted; stale), the agent's
  plan JSON as the backend validated it, its code hash and build id, the target's identity (process pid
  and start time, module and its build id, or the kernel's build id) and who did what when: made,
  requested, approved or rejected, installed, reverted; the install's and revert's details, and the two
  measurements taken before and after the install.

Revision ID: 0005_plans
Revises: 0004_series
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0005_plans"
down_revision = "0004_series"
branch_labels = None
depends_on = None


def upgrade() -> None:
    ts = sa.DateTime(timezone=True)
    op.create_table(
        "plans",
        sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
        sa.Column("host_id", sa.Text, sa.ForeignKey("hosts.id", ondelete="CASCADE"), nullable=False),
        sa.Column("target_id", sa.String(64), nullable=False),
        sa.Column("root_digest", sa.String(64), nullable=False),
        sa.Column("root_function_index", sa.Integer, nullable=False),
        sa.Column("root_name", sa.Text, nullable=False),
        sa.Column("options", pg.JSONB, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("plan_json", pg.JSONB, nullable=True),
        sa.Column("plan_status", sa.String(16), nullable=True),
        sa.Column("estimated", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("code_sha256", sa.String(64), nullable=True),
        sa.Column("build_id", sa.Text, nullable=True),
        sa.Column("target_pid", sa.Integer, nullable=True),
        sa.Column("target_start_time", sa.BigInteger, nullable=True),
        sa.Column("target_module", sa.Text, nullable=True),
        sa.Column("kernel_build_id", sa.Text, nullable=True),
        sa.Column("make_command", pg.UUID(as_uuid=True), nullable=True),
        sa.Column("created_by", sa.Text, nullable=False),
        sa.Column("created_at", ts, server_default=sa.func.now(), nullable=False),
        sa.Column("ready_at", ts, nullable=True),
        sa.Column("requested_by", sa.Text, nullable=True),
        sa.Column("requested_at", ts, nullable=True),
        sa.Column("approved_by", sa.Text, nullable=True),
        sa.Column("approved_at", ts, nullable=True),
        sa.Column("approved_code_sha256", sa.String(64), nullable=True),
        sa.Column("approved_build_id", sa.Text, nullable=True),
        sa.Column("rejected_by", sa.Text, nullable=True),
        sa.Column("rejected_at", ts, nullable=True),
        sa.Column("reject_reason", sa.Text, nullable=True),
        sa.Column("install_by", sa.Text, nullable=True),
        sa.Column("install_command", pg.UUID(as_uuid=True), nullable=True),
        sa.Column("installed_at", ts, nullable=True),
        sa.Column("install_detail", pg.JSONB, nullable=True),
        sa.Column("revert_by", sa.Text, nullable=True),
        sa.Column("revert_command", pg.UUID(as_uuid=True), nullable=True),
        sa.Column("reverted_at", ts, nullable=True),
        sa.Column("revert_detail", pg.JSONB, nullable=True),
        sa.Column("stale_reason", sa.Text, nullable=True),
        sa.Column("window_s", sa.Integer, nullable=True),
        sa.Column("before_measurement", sa.String(64), nullable=True),
        sa.Column("after_measurement", sa.String(64), nullable=True),
        sa.Column("updated_at", ts, server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_plans_host_created", "plans", ["host_id", "created_at"])
    op.create_index("ix_plans_host_target_state", "plans", ["host_id", "target_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_plans_host_target_state", table_name="plans")
    op.drop_index("ix_plans_host_created", table_name="plans")
    op.drop_table("plans")
