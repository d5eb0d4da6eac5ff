# SPDX-License-Identifier: Apache-2.0
"""Edge counts of measured functions, alongside their values.

measurement_points gains six parallel arrays, one element per CFG edge the agent derived in that
interval (app.protocol.measured_edges checks them): the function's row, the from and to block offsets (-1 where
the edge enters or leaves the function), the edge kind and label (the proto's EdgeKind and EdgeLabel
numbers) and the count. They live in the same hourly partitions as the values, so retention drops them
with their interval; the rollups do not carry them (edge counts are read from raw intervals).
"""

from alembic import op

revision = "0006_measurement_edges"
down_revision = "0005_plans"
branch_labels = None
depends_on = None

COLUMNS = (
    ("edge_rows", "integer"),
    ("edge_from", "integer"),
    ("edge_to", "integer"),
    ("edge_kinds", "smallint"),
    ("edge_labels", "smallint"),
    ("edge_counts", "bigint"),
)


def upgrade() -> None:
    for name, kind in COLUMNS:
        op.execute(f"ALTER TABLE measurement_points ADD COLUMN {name} {kind}[] NOT NULL DEFAULT '{{}}'")


def downgrade() -> None:
    for name, _kind in COLUMNS:
        op.execute(f"ALTER TABLE measurement_points DROP COLUMN {name}")
