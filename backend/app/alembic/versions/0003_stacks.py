# SPDX-License-Identifier: Apache-2.0
"""Call stacks and sample context: stack definitions per host (content-addressed by the agent's stack
id, which the backend recomputes), stack counts per host, interval and stack (per-context counts in
arrays), idle samples by context (block_samples.idle, interval_totals.idle_samples) and per-instruction
counts of a block (block_samples.insn_offsets / insn_counts).

Samples stored before this revision carry no context: the ones in the kernel's idle-loop functions (the
name heuristic that recognised idle until now) are marked idle, so old ranges read as they did.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)
# The name heuristic of earlier versions, for samples stored without their context.
IDLE_FUNCTION_RE = (
    r"^(pv_native_safe_halt|native_safe_halt|native_halt|default_idle|default_idle_call|"
    r"arch_cpu_idle|cpu_idle_poll|do_idle|poll_idle|acpi_safe_halt|acpi_idle_.*|intel_idle.*|"
    r"mwait_idle.*|amd_e400_idle|cpuidle_enter.*|xen_safe_halt|hlt_play_dead)$"
)


def upgrade() -> None:
    op.add_column("block_samples", sa.Column("idle", sa.Boolean, nullable=False, server_default=sa.false()))
    op.add_column("block_samples", sa.Column("insn_offsets", pg.ARRAY(sa.Integer)))
    op.add_column("block_samples", sa.Column("insn_counts", pg.ARRAY(sa.BigInteger)))
    op.add_column("interval_totals", sa.Column("idle_samples", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column(
        "interval_totals", sa.Column("idle_by_context", sa.Boolean, nullable=False, server_default=sa.false())
    )
    op.add_column("interval_totals", sa.Column("stack_samples", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column(
        "interval_totals", sa.Column("stack_dropped_samples", sa.BigInteger, nullable=False, server_default="0")
    )
    op.execute(
        sa.text("""
        UPDATE block_samples SET idle = true
        WHERE function_id IN (SELECT id FROM functions WHERE name ~ :re)""").bindparams(re=IDLE_FUNCTION_RE)
    )
    op.execute("""
        UPDATE interval_totals it SET idle_samples = s.n
        FROM (SELECT host_id, ts, sum(count) AS n FROM block_samples WHERE idle GROUP BY host_id, ts) s
        WHERE s.host_id = it.host_id AND s.ts = it.ts""")
    op.create_table(
        "stack_defs",
        sa.Column("host_id", sa.Text, primary_key=True),
        sa.Column("stack_id", sa.BigInteger, primary_key=True),
        sa.Column("modules", pg.JSONB, nullable=False),
        sa.Column("frames", pg.ARRAY(sa.BigInteger), nullable=False),
        sa.Column("seen_at", TZ, nullable=False, server_default=sa.func.now()),
    )
    op.create_table(
        "stack_samples",
        sa.Column("host_id", sa.Text, nullable=False),
        sa.Column("ts", TZ, nullable=False),
        sa.Column("stack_id", sa.BigInteger, nullable=False),
        sa.Column("count", sa.BigInteger, nullable=False),
        sa.Column("pids", pg.ARRAY(sa.Integer), nullable=False),
        sa.Column("comms", pg.ARRAY(sa.Text), nullable=False),
        sa.Column("cpus", pg.ARRAY(sa.Integer), nullable=False),
        sa.Column("counts", pg.ARRAY(sa.BigInteger), nullable=False),
    )
    op.create_index("ix_stack_samples_host_ts", "stack_samples", ["host_id", "ts"])


def downgrade() -> None:
    op.drop_table("stack_samples")
    op.drop_table("stack_defs")
    for column in ("stack_dropped_samples", "stack_samples", "idle_by_context", "idle_samples"):
        op.drop_column("interval_totals", column)
    for column in ("insn_counts", "insn_offsets", "idle"):
        op.drop_column("block_samples", column)
