# SPDX-License-Identifier: Apache-2.0
"""What the spread over database nodes costs the backend as built (docs/decisions.md, "Several database
nodes, built" and "Fleet hot code read per node"): the fleet's hot code and the ingest writer's commits, on
one database and on a coordinator with one node, the same rows in both. With the node the hot code is read
both ways, in alternating order: per database (each database's part over its own connection, as the backend
reads it since session 25) and through the coordinator's foreign partitions (as before: the one-database path
with the spread parents first in the search path). Not a test; prints its figures. Needs Debian's
postgresql-15 (as backend/tests/core/test_db_nodes.py, whose cluster helper it uses). Run from backend/:
    .venv/bin/python ../docs/experiments/db_nodes_fleet.py [HOSTS] [INTERVALS] [REPS]
"""

import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backend"))

from sqlalchemy import text  # noqa: E402

from app.core.db import make_engine, make_sessionmaker, upgrade_database  # noqa: E402
from app.storage import fleet, nodes  # noqa: E402
from app.storage.ingest import IngestWriter, Item, SampleRow  # noqa: E402
from app.storage.samples import TimeRange  # noqa: E402
from app.storage.series import partitions, rollups  # noqa: E402
from tests.core.test_db_nodes import Cluster, _bindir  # noqa: E402

HOSTS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
INTERVALS = int(sys.argv[2]) if len(sys.argv) > 2 else 360  # of 10 s: one hour
REPS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
FUNCS, PER_INTERVAL = 3000, 37
DIGEST = "e" * 64


async def _prepare(engine, node_engines) -> None:
    now = datetime.now(UTC)
    for e in (engine, *node_engines):
        await partitions.ensure(e, now, timedelta(hours=4), timedelta(days=2))
    async with engine.begin() as conn:
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
            text(
                "INSERT INTO catalog_pieces (digest, module, function_count, block_count, complete) "
                "VALUES (:d, 'vmlinux', :n, :n, true)"
            ),
            {"d": DIGEST, "n": FUNCS},
        )
        await conn.execute(
            text("""
            INSERT INTO functions (id, digest, index, name, "offset", size, block_count, undecodable,
                undecodable_offset)
            SELECT 100000 + k, :d, k, 'fn_' || k, k * 64, 64, 1, false, 0 FROM generate_series(0, :n - 1) k"""),
            {"d": DIGEST, "n": FUNCS},
        )


def _items(start: datetime) -> list[Item]:
    rnd = random.Random(19)
    items = []
    for h in range(1, HOSTS + 1):
        host = f"host-{h:04d}"
        for i in range(INTERVALS):
            fids = sorted({100000 + int(FUNCS * rnd.random() ** 3) for _ in range(PER_INTERVAL)})
            counts = [1 + rnd.randrange(40) for _ in fids]
            row = SampleRow(
                host,
                start + timedelta(seconds=10 * i),
                10000,
                (sum(counts) + 50, 0, 0, 0, 0, 50),
                fids,
                [0] * len(fids),
                counts,
            )
            items.append(Item(host_id=host, samples=row, mark=(f"inst-{host}", i + 1)))
    return items


async def _load(writer: IngestWriter, items: list[Item]) -> float:
    t0 = time.perf_counter()
    futures = [await writer.submit(it) for it in items]
    await asyncio.gather(*futures)
    return time.perf_counter() - t0


async def _one_by_one(writer: IngestWriter, host: str, start: datetime, n: int) -> float:
    """n single-interval commits of one host, one after the other: milliseconds each (median)."""
    took = []
    for i in range(n):
        row = SampleRow(host, start + timedelta(milliseconds=i), 1000, (3, 0, 0, 0, 0, 0), [100000], [0], [2])
        t0 = time.perf_counter()
        await writer.write(Item(host_id=host, samples=row, mark=(f"one-{host}", i + 1)))
        took.append(time.perf_counter() - t0)
    return statistics.median(took) * 1000


async def _hot_once(engine, r: TimeRange, spread, way: str) -> tuple[float, bytes]:
    """One request of the hot code, read `way`: "one" (one database), "per node" or "fdw" (through the
    coordinator's spread parents, the path before session 25). Milliseconds and the whole answer's JSON."""
    nodes.configure(spread if way == "per node" else None)
    try:
        async with make_sessionmaker(engine)() as session:
            if way == "fdw":
                await session.execute(
                    text(
                        f"SELECT set_config('search_path', '{nodes.SCHEMA}, ' || current_setting('search_path'), true)"
                    )
                )
            group = (await fleet.groups(session, {}, 10, 0, "hosts", True))["items"][0]
            t0 = time.perf_counter()
            got = await fleet.hot_code(session, group, {}, r, 0.01, 50, 0, "samples", True)
            took = time.perf_counter() - t0
    finally:
        nodes.configure(spread)
    return took * 1000, orjson.dumps(got)


async def _hot(engine, r: TimeRange, spread, ways: tuple[str, ...]) -> dict[str, tuple[list[float], bytes]]:
    """REPS requests each way, the ways' order alternating from one round to the next."""
    out: dict[str, tuple[list[float], bytes]] = {w: ([], b"") for w in ways}
    for k in range(REPS):
        for way in ways if k % 2 == 0 else ways[::-1]:
            ms, answer = await _hot_once(engine, r, spread, way)
            out[way] = (out[way][0] + [ms], answer)
    return out


def _ms(took: list[float]) -> str:
    return f"{statistics.median(took):.0f} ms ({min(took):.0f}-{max(took):.0f})"


async def main() -> None:
    bindir = _bindir()
    user = "postgres" if os.geteuid() == 0 else None
    top = Path(tempfile.mkdtemp(prefix="hp-nodes-x-"))
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
                await conn.execute(text("CREATE DATABASE one"))
                await conn.execute(text("CREATE DATABASE two"))
            await e.dispose()
        url = {(c.root.name, d): c.url.replace("/postgres?", f"/{d}?") for c in clusters for d in ("one", "two")}
        upgrade_database(url["a", "one"])
        upgrade_database(url["a", "two"])
        nodes.setup(url["a", "two"], [url["b", "two"]])
        start = (datetime.now(UTC) - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
        items = _items(start)
        print(
            f"== {HOSTS} hosts x {INTERVALS} intervals of 10 s, {PER_INTERVAL} draws of {FUNCS} functions each: "
            f"{len(items)} rows; load average {os.getloadavg()[0]:.1f}"
        )
        results = {}
        for layout in ("one", "two"):
            engine = make_engine(url["a", layout])
            spread = nodes.Nodes(engine, [url["b", "two"]]) if layout == "two" else None
            nodes.configure(spread)
            node_engines = [n.engine for n in spread.nodes] if spread else []
            await _prepare(engine, node_engines)
            writer = IngestWriter(engine, nodes=spread)
            writer.start()
            loaded = await _load(writer, _items(start))
            on_b = ""
            if spread:
                placed = await spread.place([f"host-{h:04d}" for h in range(1, HOSTS + 1)])
                on_b = f" ({sum(placed.values())} hosts on B)"
                host_a = next(h for h, n in placed.items() if n == 0)
                host_b = next(h for h, n in placed.items() if n == 1)
            else:
                host_a = host_b = "host-0001"
            later = start + timedelta(hours=1, minutes=30)
            one_a = await _one_by_one(writer, host_a, later, 200)
            one_b = await _one_by_one(writer, host_b, later + timedelta(seconds=1), 200)
            await writer.stop()
            for e in (engine, *node_engines):
                await rollups.run_once(e, lag_s=0)
            ways = ("per node", "fdw") if spread else ("one",)
            hour = await _hot(engine, TimeRange(start, start + timedelta(hours=1)), spread, ways)
            minutes = await _hot(
                engine, TimeRange(start + timedelta(minutes=3), start + timedelta(minutes=58)), spread, ways
            )
            results[layout] = {w: (hour[w][1], minutes[w][1]) for w in ways}
            print(
                f"-- {layout} database(s){on_b}: load through the writer {loaded:.1f} s "
                f"({len(items) / loaded:.0f} rows/s); one-interval commits, median of 200: "
                f"{host_a} {one_a:.1f} ms, {host_b} {one_b:.1f} ms"
            )
            for w in ways:
                print(
                    f"   hot code read {w}, top 50, median (range) of {REPS}: the hour {_ms(hour[w][0])}; "
                    f"minutes 3-58 {_ms(minutes[w][0])}; load average {os.getloadavg()[0]:.1f}"
                )
            nodes.configure(None)
            if spread:
                await spread.dispose()
            await engine.dispose()
        two = results["two"]
        items = {
            w: [[(i["function_id"], i["samples"], i["hot_hosts"]) for i in orjson.loads(a)["items"]] for a in answers]
            for w, answers in (("one", results["one"]["one"]), *two.items())
        }
        print(f"   same items on one and two databases: {items['one'] == items['per node'] == items['fdw']}")
        same = two["per node"] == two["fdw"]
        print(f"   two databases, per node and through the parents, whole answers byte-identical: {same}")
        print(f"== done; load average {os.getloadavg()[0]:.1f}")
    finally:
        for c in clusters:
            c.stop("immediate")
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
