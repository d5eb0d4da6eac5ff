# SPDX-License-Identifier: Apache-2.0
"""Call stacks summed per kernel-build group: the fleet's flame graph without a scan per host.

The fleet flame graph and compare (issue 19) summed the per-host stack rollups of a group's hosts, per stack
id: hosts x distinct stacks x contexts rows, far past one second for a group of real hosts (a real host's hour
holds ~370,000 stacks and contexts). Stack ids are content ids, shared by the hosts of one build, so the
build's samples per stack id are one key space:

- `stack_group_samples_1m` and `_10m`: samples per (group, bucket, stack id, idle or not), the group being the
  host's kernel-build group (md5 of kernel release and build id, as `app.storage.fleet` names groups) when
  the rows were summed;
- `stack_host_totals_1m` and `_10m`: each host's samples per (bucket, group, idle or not), the parts the
  group rows are the sum of. A reader takes the group rows only when the group's hosts are exactly the hosts
  whose parts they hold and the totals agree (app.storage.stacks, `group_stacks`); else it reads per host.

`stack_group_state.since`: where the group rows are complete from. The stack rollups already stored are
summed here with each host's group of now, and `since` is -infinity; a database node's hosts are on the
coordinator, so a node with stack rollups already stored cannot sum them here: its `since` is its minute
watermark (the rollup task and the writer keep its group rows from there on), and a group read of a range
starting before every database's `since` is read per host.

Both are kept where the per-host stack rollups are kept, in the same transactions (app.storage.series.rollups
and the ingest writer's late batches), partitioned by hour and dropped with the call stacks. The group rows
are not spread by host over database nodes (they have no host): each database keeps its own hosts' part and a
reader adds the databases' parts; the host totals are spread and moved with their host.

Revision ID: 0020_stack_group_rollups
Revises: 0019_rollouts
Create Date: 2026-11-29
"""

from datetime import UTC, datetime, timedelta

from alembic import op
from sqlalchemy import text

revision = "0020_stack_group_rollups"
down_revision = "0019_rollouts"
branch_labels = None
depends_on = None

GRAINS = ("1m", "10m")
GROUP_ID = "md5(h.kernel_release || chr(10) || h.kernel_build_id)"


def upgrade() -> None:
    # Each table: its columns but the count, and its unique key.
    tables = {
        "stack_group_samples": (
            "group_id text NOT NULL, bucket timestamptz NOT NULL, stack_id bigint NOT NULL",
            "group_id, bucket, stack_id, idle",
        ),
        "stack_host_totals": (
            "host_id text NOT NULL, bucket timestamptz NOT NULL, group_id text NOT NULL",
            "host_id, bucket, group_id, idle",
        ),
    }
    for grain in GRAINS:
        for table, (columns, key) in tables.items():
            op.execute(f"""
                CREATE TABLE {table}_{grain} ({columns}, idle boolean NOT NULL, count bigint NOT NULL)
                PARTITION BY RANGE (bucket)""")
            op.execute(f"CREATE UNIQUE INDEX ux_{table}_{grain} ON {table}_{grain} ({key})")
        op.execute(f"CREATE INDEX ix_stack_host_totals_{grain}_group ON stack_host_totals_{grain} (group_id, bucket)")
    bind = op.get_bind()
    oldest = bind.execute(
        text("SELECT least((SELECT min(bucket) FROM stack_samples_1m), (SELECT min(bucket) FROM stack_samples_10m))")
    ).scalar()
    now = datetime.now(UTC)
    t = (min(oldest, now) if oldest is not None else now).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    while t < now + timedelta(hours=3):
        for grain in GRAINS:
            for table in (f"stack_group_samples_{grain}", f"stack_host_totals_{grain}"):
                op.execute(
                    f"CREATE TABLE {table}_p{t:%Y%m%d%H} PARTITION OF {table} "
                    f"FOR VALUES FROM ('{t.isoformat()}') TO ('{(t + timedelta(hours=1)).isoformat()}')"
                )
        t += timedelta(hours=1)
    op.execute("CREATE TABLE stack_group_state (since timestamptz NOT NULL)")
    op.execute("""
        INSERT INTO stack_group_state (since)
        SELECT CASE WHEN EXISTS (SELECT 1 FROM hosts) OR NOT EXISTS (SELECT 1 FROM stack_samples_1m)
                    THEN TIMESTAMPTZ '-infinity'
                    ELSE (SELECT watermark_1m FROM series_state WHERE name = 'rollups') END""")
    for grain in GRAINS:
        op.execute(f"""
            INSERT INTO stack_group_samples_{grain} (group_id, bucket, stack_id, idle, count)
            SELECT {GROUP_ID}, r.bucket, r.stack_id, r.pid = 0, sum(r.count)
            FROM stack_samples_{grain} r JOIN hosts h ON h.id = r.host_id
            GROUP BY 1, 2, 3, 4""")
        op.execute(f"""
            INSERT INTO stack_host_totals_{grain} (host_id, bucket, group_id, idle, count)
            SELECT r.host_id, r.bucket, {GROUP_ID}, r.pid = 0, sum(r.count)
            FROM stack_samples_{grain} r JOIN hosts h ON h.id = r.host_id
            GROUP BY 1, 2, 3, 4""")


def downgrade() -> None:
    op.execute("DROP TABLE stack_group_state")
    for grain in GRAINS:
        op.execute(f"DROP TABLE stack_group_samples_{grain}")
        op.execute(f"DROP TABLE stack_host_totals_{grain}")
