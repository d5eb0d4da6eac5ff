# SPDX-License-Identifier: Apache-2.0
"""Initial schema: users, audit log, hosts and their modules, the content-addressed catalog,
instruction cache and the block-sample time series.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
        sa.Column("username", sa.String(64), nullable=False, unique=True),
        sa.Column("password_hash", sa.Text, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", TZ, nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("role in ('viewer','operator','approver','admin')", name="ck_users_role"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("at", TZ, nullable=False, server_default=sa.func.now()),
        sa.Column("actor", sa.Text, nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.Text),
        sa.Column("detail", pg.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])
    op.create_index("ix_audit_log_action", "audit_log", ["action"])
    op.create_table(
        "hosts",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("hostname", sa.Text, nullable=False),
        sa.Column("kernel_release", sa.Text, nullable=False, server_default=""),
        sa.Column("kernel_build_id", sa.Text, nullable=False, server_default=""),
        sa.Column("cpu_model", sa.Text, nullable=False, server_default=""),
        sa.Column("cpu_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("l1i", pg.JSONB),
        sa.Column("capabilities", pg.JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
        sa.Column("agent_version", sa.Text, nullable=False, server_default=""),
        sa.Column("metric_interval_ms", sa.Integer, nullable=False, server_default="1000"),
        sa.Column("sample_frequency_hz", sa.Integer, nullable=False, server_default="0"),
        sa.Column("sample_event", sa.Text, nullable=False, server_default=""),
        sa.Column("parse_seconds", sa.Float, nullable=False, server_default="0"),
        sa.Column("online", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("last_seen", TZ),
        sa.Column("connected_at", TZ),
        sa.Column("session_id", sa.Text),
    )
    op.create_table(
        "catalog_pieces",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("module", sa.Text, nullable=False),
        sa.Column("function_count", sa.Integer, nullable=False),
        sa.Column("block_count", sa.Integer, nullable=False),
        sa.Column("complete", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("stored_at", TZ),
    )
    op.create_table(
        "host_modules",
        sa.Column("host_id", sa.Text, sa.ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("base_address", sa.BigInteger, nullable=False),
        sa.Column("function_count", sa.Integer, nullable=False),
        sa.Column("block_count", sa.Integer, nullable=False),
        sa.Column("position", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_index("ix_host_modules_digest", "host_modules", ["digest"])
    op.create_table(
        "functions",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("digest", sa.String(64), sa.ForeignKey("catalog_pieces.digest", ondelete="CASCADE"), nullable=False),
        sa.Column("index", sa.Integer, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        # Kernel symbols are ASCII; a stored lower-case copy lets substring search use LIKE, several
        # times faster than ILIKE on a sequential scan.
        sa.Column("name_lc", sa.Text, sa.Computed("lower(name)", persisted=True)),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("block_count", sa.Integer, nullable=False),
        sa.Column("undecodable", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("undecodable_offset", sa.BigInteger, nullable=False, server_default="0"),
        sa.UniqueConstraint("digest", "index", name="uq_functions_digest_index"),
    )
    op.create_index("ix_functions_name", "functions", ["name"])
    op.create_index("ix_functions_digest_offset", "functions", ["digest", "offset"])
    # Substring search over a whole kernel: a trigram index when the server has pg_trgm (the
    # embedded Postgres does not; a sequential scan of the narrow table is then fast enough).
    op.execute("""
        DO $$
        BEGIN
          IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') THEN
            CREATE EXTENSION IF NOT EXISTS pg_trgm;
            CREATE INDEX IF NOT EXISTS ix_functions_name_trgm ON functions USING gin (name_lc gin_trgm_ops);
          END IF;
        END $$;
    """)
    op.create_table(
        "function_code",
        sa.Column(
            "digest", sa.String(64), sa.ForeignKey("catalog_pieces.digest", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("index", sa.Integer, primary_key=True),
        sa.Column("blocks", pg.JSONB, nullable=False),
        sa.Column("calls", pg.JSONB, nullable=False),
        sa.Column("indirect_call_sites", pg.JSONB, nullable=False),
    )
    op.create_table(
        "instruction_cache",
        sa.Column(
            "digest", sa.String(64), sa.ForeignKey("catalog_pieces.digest", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("index", sa.Integer, primary_key=True),
        sa.Column("instructions", pg.JSONB, nullable=False),
        sa.Column("stored_at", TZ, nullable=False, server_default=sa.func.now()),
    )
    op.create_table(
        "block_samples",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("host_id", sa.Text, nullable=False),
        sa.Column("ts", TZ, nullable=False),
        sa.Column("function_id", sa.BigInteger, nullable=False),
        sa.Column("block_offset", sa.Integer, nullable=False),
        sa.Column("count", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_block_samples_host_ts", "block_samples", ["host_id", "ts"])
    op.create_index("ix_block_samples_host_fn_ts", "block_samples", ["host_id", "function_id", "ts"])
    op.create_table(
        "interval_totals",
        sa.Column("host_id", sa.Text, primary_key=True),
        sa.Column("ts", TZ, primary_key=True),
        sa.Column("interval_ms", sa.Integer, nullable=False),
        sa.Column("total_samples", sa.BigInteger, nullable=False),
        sa.Column("user_samples", sa.BigInteger, nullable=False),
        sa.Column("unmapped_samples", sa.BigInteger, nullable=False),
        sa.Column("lost_samples", sa.BigInteger, nullable=False),
        sa.Column("dropped_samples", sa.BigInteger, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    for table in (
        "interval_totals",
        "block_samples",
        "instruction_cache",
        "function_code",
        "functions",
        "host_modules",
        "catalog_pieces",
        "hosts",
        "audit_log",
        "users",
    ):
        op.drop_table(table)
