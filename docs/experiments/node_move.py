# SPDX-License-Identifier: Apache-2.0
"""How long `python -m app nodes move` takes (docs/decisions.md, "Moving hosts between database nodes"):
hosts with an hour of sample intervals and their rollups on a coordinator alone, a node added (about half
the hosts move to it), then removed again (they move back). Not a test; prints its figures. Needs Debian's
postgresql-15 (as backend/tests/core/test_db_nodes.py, whose cluster helper it uses). Run from backend/:
    .venv/bin/python ../docs/experiments/node_move.py [HOSTS] [INTERVALS]
"""

import asyncio
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backend"))

from sqlalchemy import text  # noqa: E402

from app.core.db import make_engine, upgrade_database  # noqa: E402
from app.storage import node_moves, nodes  # noqa: E402
from app.storage.series import partitions, rollups  # noqa: E402
from tests.core.test_db_nodes import Cluster, _bindir  # noqa: E402

HOSTS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
INTERVALS = int(sys.argv[2]) if len(sys.argv) > 2 else 360  # of 10 s: one hour
FUNCS, PER_INTERVAL = 3000, 37


async def _load(url: str) -> None:
    """The hosts' sample intervals written in SQL (the writer's path is not what is measured), rolled up."""
    engine = make_engine(url)
    now = datetime.now(UTC)
    start = (now - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    await partitions.ensure(engine, now, timedelta(hours=4), timedelta(days=2))
    async with engine.begin() as conn:
        # The rollups start before the rows (a database's watermark starts at its migration: rows older than
        # that would be late rows, which the writer, not the rollup task, sums).
        await conn.execute(
            text("UPDATE series_state SET watermark_1m = :t, watermark_1h = :t WHERE name = 'rollups'"), {"t": start}
        )
        await conn.execute(
            text("""
            INSERT INTO hosts (id, hostname, kernel_release, kernel_build_id, cpu_model, cpu_count, capabilities,
                agent_version, metric_interval_ms, sample_frequency_hz, sample_event, parse_seconds, online,
                connected_at, status, refused_batches, labels, agent_labels)
            SELECT 'host-' || lpad(h::text, 4, '0'), 'host-' || h, '6.1.0', 'b1', '', 2, '[]', '', 10000, 99, '', 0,
                   true, now(), 'active', 0, '{}', '{}' FROM generate_series(1, :n) h"""),
            {"n": HOSTS},
        )
        await conn.execute(
            text("""
            INSERT INTO sample_intervals (host_id, ts, interval_ms, total_samples, user_samples, unmapped_samples,
                lost_samples, dropped_samples, idle_samples, function_ids, block_offsets, counts, idles, batch)
            SELECT 'host-' || lpad(h::text, 4, '0'), CAST(:start AS timestamptz) + i * interval '10 s', 10000,
                   2000, 0, 0, 0, 0, 50, f.ids, array_fill(0, ARRAY[:k]), array_fill(20, ARRAY[:k]),
                   array_fill(false, ARRAY[:k]), h * 100000 + i
            FROM generate_series(1, :n) h, generate_series(0, :i - 1) i,
                 LATERAL (SELECT array_agg(100000 + ((h * 7919 + i * 104729 + j * 31) % :f) ORDER BY j) AS ids
                          FROM generate_series(1, :k) j) f"""),
            {"start": start, "n": HOSTS, "i": INTERVALS, "k": PER_INTERVAL, "f": FUNCS},
        )
        await conn.execute(
            text("""
            INSERT INTO delivery_marks (host_id, instance_id, seq, updated_at)
            SELECT 'host-' || lpad(h::text, 4, '0'), 'inst', :i, now() FROM generate_series(1, :n) h"""),
            {"n": HOSTS, "i": INTERVALS},
        )
    await rollups.run_once(engine, lag_s=0)
    await engine.dispose()


async def _rows(urls: list[str]) -> dict[str, int]:
    got: dict[str, int] = {}
    for url in urls:
        engine = make_engine(url)
        async with engine.connect() as conn:
            for t in nodes.SPREAD_TABLES:
                if (await conn.execute(text("SELECT to_regclass(:t)"), {"t": t})).scalar_one() is not None:
                    got[t] = got.get(t, 0) + (await conn.execute(text(f"SELECT count(*) FROM {t}"))).scalar_one()
        await engine.dispose()
    return got


def _move(url_a: str, node_urls: list[str], what: str) -> None:
    said: list[str] = []
    t0 = time.perf_counter()
    plan = node_moves.move(url_a, node_urls, say=said.append)
    took = time.perf_counter() - t0
    rows = sum(m.rows for m in plan.moves)
    copy = next((s for s in said if s.startswith("copied and deleted")), "")
    print(
        f"-- {what}: {len(plan.moves)} of {plan.hosts} hosts, {rows} rows, {took:.1f} s in all "
        f"({rows / took:.0f} rows/s); {copy}"
    )


async def main() -> None:
    bindir = _bindir()
    user = "postgres" if os.geteuid() == 0 else None
    top = Path(tempfile.mkdtemp(prefix="hp-nodes-mv-"))
    clusters = []
    try:
        for name in ("a", "b"):
            c = Cluster(bindir, top / name, user)
            c.root.mkdir()
            if user:
                shutil.chown(top, user)
                shutil.chown(c.root, user)
            c.init()
            c.start()
            clusters.append(c)
        for c in clusters:
            e = make_engine(c.url).execution_options(isolation_level="AUTOCOMMIT")
            async with e.connect() as conn:
                await conn.execute(text("CREATE DATABASE mv"))
            await e.dispose()
        url_a, url_b = (c.url.replace("/postgres?", "/mv?") for c in clusters)
        await asyncio.to_thread(upgrade_database, url_a)
        await _load(url_a)
        before = await _rows([url_a])
        print(
            f"== {HOSTS} hosts x {INTERVALS} intervals of 10 s, {PER_INTERVAL} functions each; "
            f"{sum(before.values())} rows in the spread tables ({before['sample_intervals']} raw); "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        t0 = time.perf_counter()
        await asyncio.to_thread(node_moves.move, url_a, [url_b], None, True, lambda s: None)
        print(f"-- dry run: {time.perf_counter() - t0:.1f} s")
        await asyncio.to_thread(_move, url_a, [url_b], "node B added")
        assert await _rows([url_a, url_b]) == before
        await asyncio.to_thread(_move, url_a, [], "node B removed")
        assert await _rows([url_a, url_b]) == before
        print(f"== done, the same rows before and after; load average {os.getloadavg()[0]:.1f}")
    finally:
        for c in clusters:
            c.stop("immediate")
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
