# SPDX-License-Identifier: Apache-2.0
"""The key an enrolment token was used with (an enrolment whose answer was lost can be asked again).

An agent whose Enroll call times out after the backend has issued its certificate asks again with the
same token and the same key; the token is used by then. `used_key_fingerprint` (SHA-256 of the CSR's
public key, as `enrolment.key_fingerprint`) lets the backend answer that retry, and only that one: the
same token, host id and key, within `enrolment.REPLAY_WINDOW_S` of the first use, while the host still
holds the certificate that token issued (`used_cert_fingerprint`): a later enrolment of the host by
another token or key ends the retry.

Revision ID: 0015_token_replay
Revises: 0014_host_labels
Create Date: 2026-11-27
"""

from alembic import op

revision = "0015_token_replay"
down_revision = "0014_host_labels"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE enrolment_tokens ADD COLUMN used_key_fingerprint text, ADD COLUMN used_cert_fingerprint text"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE enrolment_tokens DROP COLUMN used_key_fingerprint, DROP COLUMN used_cert_fingerprint")
