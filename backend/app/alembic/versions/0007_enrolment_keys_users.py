# SPDX-License-Identifier: Apache-2.0
"""Enrolment requests are per key, not per host id; users can be disabled.

enrolment_requests gains its own id and the SHA-256 fingerprint of the requesting key: a second key
asking for the same host id is a second request (shown as conflicting), never a replacement of the
first. Existing rows get their key's fingerprint from their CSR. users gains disabled_at (a disabled
user cannot sign in or use its tokens) and sessions_valid_after (tokens issued before it, that is
before a password reset or a disable, are refused).
"""

import hashlib

import sqlalchemy as sa
from alembic import op
from cryptography import x509
from cryptography.hazmat.primitives import serialization

revision = "0007_enrolment_keys_users"
down_revision = "0006_measurement_edges"
branch_labels = None
depends_on = None


def _fingerprint(csr_pem: str) -> str:
    key = (
        x509.load_pem_x509_csr(csr_pem.encode())
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return hashlib.sha256(key).hexdigest()


def upgrade() -> None:
    op.execute("ALTER TABLE enrolment_requests DROP CONSTRAINT enrolment_requests_pkey")
    op.execute("ALTER TABLE enrolment_requests ADD COLUMN id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY")
    op.execute("ALTER TABLE enrolment_requests ADD COLUMN key_fingerprint text NOT NULL DEFAULT ''")
    bind = op.get_bind()
    for row in bind.execute(sa.text("SELECT id, csr_pem FROM enrolment_requests")).all():
        try:
            fp = _fingerprint(row.csr_pem)
        except ValueError:
            fp = "unreadable-" + str(row.id)
        bind.execute(
            sa.text("UPDATE enrolment_requests SET key_fingerprint = :f WHERE id = :i"), {"f": fp, "i": row.id}
        )
    op.create_index("ux_enrolment_requests_host_key", "enrolment_requests", ["host_id", "key_fingerprint"], unique=True)
    op.create_index("ix_enrolment_requests_status_at", "enrolment_requests", ["status", "requested_at"])
    op.add_column("users", sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("users", sa.Column("sessions_valid_after", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("users", "sessions_valid_after")
    op.drop_column("users", "disabled_at")
    op.drop_index("ix_enrolment_requests_status_at", "enrolment_requests")
    op.drop_index("ux_enrolment_requests_host_key", "enrolment_requests")
    # One request per host id again: keep each host's newest.
    op.execute("""DELETE FROM enrolment_requests r USING enrolment_requests n
                  WHERE r.host_id = n.host_id AND (r.requested_at, r.id) < (n.requested_at, n.id)""")
    op.execute("ALTER TABLE enrolment_requests DROP CONSTRAINT enrolment_requests_pkey")
    op.drop_column("enrolment_requests", "id")
    op.drop_column("enrolment_requests", "key_fingerprint")
    op.execute("ALTER TABLE enrolment_requests ADD PRIMARY KEY (host_id)")
