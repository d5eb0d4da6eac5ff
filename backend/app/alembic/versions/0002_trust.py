# SPDX-License-Identifier: Apache-2.0
"""Trust and resilience: host identity (enrolment tokens, pending enrolments, certificates, retired
hosts), clock offsets, which replica holds a host's stream, delivery marks for acknowledged data
messages, data gaps, and login lockout.

Catalog pieces are now stored only once their content verifies against their digest; incomplete
pieces left by earlier versions were never verified and are removed.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.execute("DELETE FROM catalog_pieces WHERE NOT complete")
    op.add_column("hosts", sa.Column("status", sa.String(16), nullable=False, server_default="active"))
    op.create_check_constraint("ck_hosts_status", "hosts", "status in ('active','retired')")
    op.add_column("hosts", sa.Column("retired_at", TZ))
    op.add_column("hosts", sa.Column("replica", sa.Text))
    op.add_column("hosts", sa.Column("clock_offset_ms", sa.BigInteger))
    op.add_column("hosts", sa.Column("clock_checked_at", TZ))
    op.add_column("hosts", sa.Column("refused_batches", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("hosts", sa.Column("cert_fingerprint", sa.Text))
    op.add_column("hosts", sa.Column("cert_not_after", TZ))
    op.add_column("hosts", sa.Column("enrolled_at", TZ))
    op.add_column("users", sa.Column("failed_logins", sa.Integer, nullable=False, server_default="0"))
    op.add_column("users", sa.Column("locked_until", TZ))

    op.create_table(
        "enrolment_tokens",
        sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("note", sa.Text, nullable=False, server_default=""),
        sa.Column("host_id", sa.Text),
        sa.Column("created_by", sa.Text, nullable=False),
        sa.Column("created_at", TZ, nullable=False, server_default=sa.func.now()),
        sa.Column("expires_at", TZ, nullable=False),
        sa.Column("used_at", TZ),
        sa.Column("used_by_host", sa.Text),
        sa.Column("revoked_at", TZ),
    )
    op.create_table(
        "enrolment_requests",
        sa.Column("host_id", sa.Text, primary_key=True),
        sa.Column("hostname", sa.Text, nullable=False),
        sa.Column("csr_pem", sa.Text, nullable=False),
        sa.Column("peer", sa.Text, nullable=False, server_default=""),
        sa.Column("requested_at", TZ, nullable=False, server_default=sa.func.now()),
        sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("decided_by", sa.Text),
        sa.Column("decided_at", TZ),
        sa.CheckConstraint("status in ('pending','approved','rejected')", name="ck_enrolment_requests_status"),
    )
    op.create_table(
        "delivery_marks",
        sa.Column("host_id", sa.Text, sa.ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("instance_id", sa.String(64), primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("updated_at", TZ, nullable=False, server_default=sa.func.now()),
    )
    op.create_table(
        "data_gaps",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("host_id", sa.Text, sa.ForeignKey("hosts.id", ondelete="CASCADE"), nullable=False),
        sa.Column("start_ts", TZ, nullable=False),
        sa.Column("end_ts", TZ, nullable=False),
        sa.Column("instance_id", sa.String(64), nullable=False, server_default=""),
        sa.Column("first_seq", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("messages", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("recorded_at", TZ, nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("source in ('agent','backend')", name="ck_data_gaps_source"),
    )
    op.create_index("ix_data_gaps_host_end", "data_gaps", ["host_id", "end_ts"])


def downgrade() -> None:
    for table in ("data_gaps", "delivery_marks", "enrolment_requests", "enrolment_tokens"):
        op.drop_table(table)
    for column in ("failed_logins", "locked_until"):
        op.drop_column("users", column)
    op.drop_constraint("ck_hosts_status", "hosts")
    for column in (
        "status",
        "retired_at",
        "replica",
        "clock_offset_ms",
        "clock_checked_at",
        "refused_batches",
        "cert_fingerprint",
        "cert_not_after",
        "enrolled_at",
    ):
        op.drop_column("hosts", column)
