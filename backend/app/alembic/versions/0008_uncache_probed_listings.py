# SPDX-License-Identifier: Apache-2.0
"""Drop cached listings that may show a probe's int3 as code.

Agents before issue 15 decoded a process's function from its memory, where a running measurement's
uprobes are int3 bytes, and the backend cached that listing for the module's build for good: the
instruction panel and a plan's Original listing kept showing `int3` at block starts after the
measurement stopped. Agents now read the program's own bytes under a probe. Every cached listing with an
int3 in it is dropped, so it is decoded again on demand (a listing whose int3 is the program's own comes
back the same); nothing else is touched.
"""

from alembic import op

revision = "0008_uncache_probed_listings"
down_revision = "0007_enrolment_keys_users"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        DELETE FROM instruction_cache c
        WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(c.instructions) i WHERE i->>3 LIKE 'int3%')""")


def downgrade() -> None:
    pass  # a cache: what was dropped is decoded again on demand
