# SPDX-License-Identifier: Apache-2.0
"""bench/fleet_stacks: what a group's flame graph costs to sum at a real host's stack counts, read from the
kernel build's stack rollup (migration 0020) against the hosts' own stack rollups.

bench/fleet stores its hosts' stacks through the backend, but each of its hosts has a few hundred distinct
stacks an hour; a real host's hour holds far more (bench/flame's: ~370,000 stacks and contexts), and storing
that for hundreds of hosts through the ingest path takes hours here. This benchmark writes the rollups
directly instead, in one embedded Postgres of its own with the backend's migrations: an hour (six whole ten
minutes, clock-aligned, so the ten-minute rollups answer it all) of H hosts of one build, each with C
distinct (stack, pid, command, CPU) rows per ten minutes (a tenth of them the idle task's), the stacks drawn
from the build's pool of P (skewed towards the first, as a kernel's hot paths are shared by its hosts). The
build's rollup and the hosts' parts of it are summed from those rows by SQL of the same shape as the rollup
task's (per group, stack and idle; per host, group and idle), then ANALYZE.

Then K pairs, each back to back and the order alternated: `app.storage.stacks._group_rollup` (the hosts'
parts checked, the build's rows summed per stack) and `_host_rollups` (the hosts' rows summed per stack and
per host: what the flame graph read before), the default filter (idle left out). Both must give the same
samples per stack and per host, or the run fails. The frames and the tree built from the sums are the same
work either way and not timed here (bench/fleet times whole answers).
After each pair, the group less one rack (one host in twenty: the build's rollup less those hosts' own
rollups, as a compare of one rack against the others reads the others); once, checked against the other
racks' own rollups.
Last line, exactly (one line):
    fleet_stacks: H hosts, R host rows and G group rows an hour, group rollup p50 X ms p99 Y ms,
    less one rack p50 L ms p99 M ms, hosts' rollups p50 A ms p99 B ms, ratio Q
Q is the median over the pairs of (hosts' rollups ms / group rollup ms).
Sizes: HOTPATH_FLEET_STACKS_HOSTS (600), HOTPATH_FLEET_STACKS_CONTEXTS (2000 per host and ten minutes),
HOTPATH_FLEET_STACKS_POOL (30000), HOTPATH_FLEET_STACKS_PAIRS (7).
"""

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backend"))

from sqlalchemy import text  # noqa: E402

from app.core.db import (
    EmbeddedPostgres,
    make_engine,
    make_sessionmaker,
    upgrade_database,
)  # noqa: E402
from app.storage import stacks  # noqa: E402
from app.storage.series import partitions  # noqa: E402

HOSTS = int(os.environ.get("HOTPATH_FLEET_STACKS_HOSTS", "600"))
CONTEXTS = int(os.environ.get("HOTPATH_FLEET_STACKS_CONTEXTS", "2000"))
POOL = int(os.environ.get("HOTPATH_FLEET_STACKS_POOL", "30000"))
PAIRS = int(os.environ.get("HOTPATH_FLEET_STACKS_PAIRS", "7"))
GROUP = "bench-build"


def say(msg: str) -> None:
    print(msg, flush=True)


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def load(engine, hour: datetime) -> tuple[int, int]:
    """The hour's rows: the hosts' ten-minute stack rollup, then the build's and the hosts' parts of it."""
    t = time.monotonic()
    async with engine.begin() as conn:
        await conn.execute(
            text("""
            INSERT INTO stack_samples_10m (host_id, bucket, stack_id, pid, comm, cpu, count)
            SELECT host_id, bucket, stack_id, pid, 'w' || (pid % 5), cpu, sum(n)
            FROM (SELECT 'bench-' || lpad(h::text, 4, '0') AS host_id,
                         CAST(:hour AS timestamptz) + b * interval '10 minutes' AS bucket,
                         floor(:pool * power(random(), 2))::bigint + 1 AS stack_id,
                         CASE WHEN k % 10 = 0 THEN 0 ELSE 1000 + (k % 20) END AS pid,
                         k % 2 AS cpu, 1 + floor(random() * 40)::bigint AS n
                  FROM generate_series(0, :hosts - 1) h, generate_series(0, 5) b,
                       generate_series(1, :contexts) k) r
            GROUP BY 1, 2, 3, 4, 5, 6"""),
            {"hour": hour, "pool": POOL, "hosts": HOSTS, "contexts": CONTEXTS},
        )
        await conn.execute(
            text("""
            INSERT INTO stack_group_samples_10m (group_id, bucket, stack_id, idle, count)
            SELECT :g, bucket, stack_id, pid = 0, sum(count) FROM stack_samples_10m GROUP BY 2, 3, 4"""),
            {"g": GROUP},
        )
        await conn.execute(
            text("""
            INSERT INTO stack_host_totals_10m (host_id, bucket, group_id, idle, count)
            SELECT host_id, bucket, :g, pid = 0, sum(count) FROM stack_samples_10m GROUP BY 1, 2, 4"""),
            {"g": GROUP},
        )
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        for table in (
            "stack_samples_10m",
            "stack_group_samples_10m",
            "stack_host_totals_10m",
        ):
            await conn.execute(text(f"ANALYZE {table}"))
        host_rows = (await conn.execute(text("SELECT count(*) FROM stack_samples_10m"))).scalar_one()
        group_rows = (await conn.execute(text("SELECT count(*) FROM stack_group_samples_10m"))).scalar_one()
    say(f"loaded {host_rows:,} host rows and {group_rows:,} group rows in {time.monotonic() - t:.1f} s")
    return host_rows, group_rows


async def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="hotpath-fleet-stacks-"))
    pg = EmbeddedPostgres(folder / "pgdata", watchdog=False)
    ok = False
    try:
        url = pg.start()
        await asyncio.to_thread(upgrade_database, url)
        engine = make_engine(url)
        now = datetime.now(UTC)
        hour = (now - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
        await partitions.ensure(engine, now, raw_back=timedelta(hours=4), rollup_back=timedelta(days=1))
        host_rows, group_rows = await load(engine, hour)
        hosts = [f"bench-{h:04d}" for h in range(HOSTS)]
        span = {
            "lo": hour,
            "hi": hour + timedelta(hours=1),
            "lo10": hour,
            "hi10": hour + timedelta(hours=1),
        }
        flt = stacks.StackFilter()
        sessions = make_sessionmaker(engine)

        scope = stacks.GroupScope(GROUP, hosts)
        # "The other racks" of a compare: every host but one in twenty (rack r00 of bench/fleet's labels).
        others = [h for i, h in enumerate(hosts) if i % 20]

        async def group_read(which: list[str] = hosts) -> tuple[float, tuple]:
            async with sessions() as session:
                t = time.perf_counter()
                found = await stacks._group_rollup(session, scope, which, flt, span)
                dt = (time.perf_counter() - t) * 1000
            if found is None:
                raise SystemExit("the build's rollup did not answer for its hosts")
            return dt, found[:2]  # the sums, without what was read

        async def hosts_read(which: list[str] = hosts) -> tuple[float, tuple]:
            async with sessions() as session:
                t = time.perf_counter()
                found = await stacks._host_rollups(session, which, flt, span)
                return (time.perf_counter() - t) * 1000, found

        fast_ms: list[float] = []
        less_ms: list[float] = []
        slow_ms: list[float] = []
        ratios: list[float] = []
        for i in range(PAIRS):
            if i == 0:  # once: the group less a rack gives what the other racks' own rollups give
                (_, a), (_, b) = await group_read(others), await hosts_read(others)
                if a != b:
                    raise SystemExit("the build's rollup less a rack and the other racks' rollups differ")
            reads = [group_read, hosts_read] if i % 2 == 0 else [hosts_read, group_read]
            got = {}
            for read in reads:
                got[read] = await read()
            (fast, a), (slow, b) = got[group_read], got[hosts_read]
            if a != b:
                raise SystemExit("the build's rollup and the hosts' rollups differ")
            less = (await group_read(others))[0]
            fast_ms.append(fast)
            less_ms.append(less)
            slow_ms.append(slow)
            ratios.append(slow / fast)
            say(
                f"pair {i + 1}: group rollup {fast:.0f} ms, hosts' rollups {slow:.0f} ms ({len(a[0]):,} stacks); "
                f"the group less one rack {less:.0f} ms"
            )
        await engine.dispose()
        print(
            f"fleet_stacks: {HOSTS} hosts, {host_rows} host rows and {group_rows} group rows an hour, "
            f"group rollup p50 {percentile(fast_ms, 0.5):.0f} ms p99 {percentile(fast_ms, 0.99):.0f} ms, "
            f"less one rack p50 {percentile(less_ms, 0.5):.0f} ms p99 {percentile(less_ms, 0.99):.0f} ms, "
            f"hosts' rollups p50 {percentile(slow_ms, 0.5):.0f} ms p99 {percentile(slow_ms, 0.99):.0f} ms, "
            f"ratio {statistics.median(ratios):.1f}"
        )
        ok = True
    finally:
        pg.stop()
        if ok:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            say(f"data kept in {folder}")


if __name__ == "__main__":
    asyncio.run(main())
