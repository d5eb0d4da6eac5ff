# SPDX-License-Identifier: Apache-2.0
"""Count a measurement's refused intervals and keep the reason of the last one.

A measurement batch whose content the backend refuses (flow not conserved, a value for a row the
measurement lacks, ...) used to end the agent's stream unacknowledged, so the agent resent it on every
reconnect and the host stayed offline. It is now refused alone: acknowledged, not stored, counted here
and recorded as a data gap.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_measurement_refusals"
down_revision = "0008_uncache_probed_listings"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("measurements", sa.Column("refused_intervals", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("measurements", sa.Column("refusal", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_column("measurements", "refusal")
    op.drop_column("measurements", "refused_intervals")
