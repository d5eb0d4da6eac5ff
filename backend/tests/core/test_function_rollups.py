# SPDX-License-Identifier: Apache-2.0
"""The per-function rollups (migration 0016) on a real Postgres database of their own, whose rollup
watermarks the test moves: the fleet's hot code, read from `sample_functions_1m`/`_10m`/`_1h`, equals the
same figures computed from the raw sample intervals, for ranges aligned to hours, to ten minutes and to
nothing, with intervals summed by the rollup task and late ones summed by the writer's late path
(`rollups.add_late_samples`, what the ingest writer calls for rows it stores below a watermark) into
minutes, ten minutes and hours already rolled up."""

import hashlib
import random
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from app.core.db import make_engine, make_sessionmaker, upgrade_database
from app.storage import fleet
from app.storage.models import CatalogPiece, Function, Host
from app.storage.samples import TimeRange
from app.storage.series import partitions, rollups
from tests.conftest import _recreate_database

T0 = datetime(2002, 3, 4, 10, 0, tzinfo=UTC)
RELEASE, BUILD = "6.18.0-rollup", "ab" * 20
GROUP = {"id": hashlib.md5(f"{RELEASE}\n{BUILD}".encode()).hexdigest(), "kernel_release": RELEASE}
HOSTS = {"g1": {"role": "db"}, "g2": {"role": "db"}, "g3": {"role": "web"}, "other": {"role": "db"}}
MIN_SHARE = 0.2


@pytest.fixture(scope="module")
def rollup_db(postgres_url):
    url = _recreate_database(postgres_url, "hotpath_function_rollups")
    upgrade_database(url)
    return url


def _minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0)


class Fleet:
    """Four hosts (three of one kernel build, one of another), their raw intervals, the rollup watermarks."""

    def __init__(self, engine, fids: list[int]) -> None:
        self.engine = engine
        self.fids = fids
        self.rng = random.Random(19)

    def intervals(self, lo: datetime, hi: datetime, step_s: int) -> list[rollups.LateInterval]:
        """Every host's intervals from lo to hi, `step_s` apart from a host-dependent start: random
        functions and blocks (a block sometimes twice in one interval), some of the idle task's."""
        out = []
        for k, host in enumerate(HOSTS):
            t = lo + timedelta(seconds=7 * k)
            while t < hi:
                picks = [(self.rng.choice(self.fids[: 4 + 3 * k]), self.rng.choice((0, 0x10))) for _ in range(4)]
                counts = [self.rng.randint(1, 60) for _ in picks]
                idles = [self.rng.random() < 0.2 for _ in picks]
                idle = sum(c for c, i in zip(counts, idles, strict=True) if i)
                user = self.rng.randint(0, 30)
                totals = (sum(counts) + user, user, 0, 0, 0, idle, 0, 0)
                out.append(
                    rollups.LateInterval(
                        host_id=host,
                        ts=t,
                        interval_ms=step_s * 1000,
                        totals=totals,
                        function_ids=[f for f, _ in picks],
                        block_offsets=[o for _, o in picks],
                        counts=counts,
                        idles=idles,
                    )
                )
                t += timedelta(seconds=step_s + self.rng.randint(0, 9))
        return out

    async def store(self, rows: list[rollups.LateInterval], late: bool) -> None:
        """Insert raw intervals; when `late`, sum them into the rollups in the same transaction as the
        ingest writer does for rows below the watermarks (all of them are below here)."""
        async with self.engine.begin() as conn:
            wm_1m, wm_1h = await rollups.watermarks(conn, for_share=True)
            if late:
                assert all(r.ts < wm_1m for r in rows)
            else:
                assert all(r.ts >= wm_1m for r in rows)
            for r in rows:
                await conn.execute(
                    text("""
                    INSERT INTO sample_intervals (host_id, ts, interval_ms, total_samples, user_samples,
                        unmapped_samples, lost_samples, dropped_samples, idle_samples, stack_samples,
                        stack_dropped_samples, function_ids, block_offsets, counts, idles, batch)
                    VALUES (:h, :ts, :ms, :t0, :t1, :t2, :t3, :t4, :t5, :t6, :t7, :f, :o, :c, :i, 0)"""),
                    {
                        "h": r.host_id,
                        "ts": r.ts,
                        "ms": r.interval_ms,
                        **{f"t{n}": v for n, v in enumerate(r.totals)},
                        "f": list(r.function_ids),
                        "o": list(r.block_offsets),
                        "c": list(r.counts),
                        "i": list(r.idles or []),
                    },
                )
            if late:
                await rollups.add_late_samples(conn, rows, wm_1m, wm_1h)

    async def roll(self, now: datetime) -> None:
        await rollups.run_once(self.engine, now=now, lag_s=0)
        async with self.engine.connect() as conn:
            assert await rollups.watermarks(conn) == (now, now.replace(minute=0))

    async def raw_answer(self, lo: datetime, hi: datetime, hosts: list[str]) -> tuple[dict, dict]:
        """From the raw intervals in [lo, hi): each host's busy samples, and per function its samples, hot
        hosts and cells, as hot code computes them."""
        async with self.engine.connect() as conn:
            busy = {
                r[0]: int(r[1])
                for r in await conn.execute(
                    text("""SELECT host_id, sum(total_samples - idle_samples) FROM sample_intervals
                    WHERE host_id = ANY(:h) AND ts >= :lo AND ts < :hi GROUP BY 1"""),
                    {"h": hosts, "lo": lo, "hi": hi},
                )
            }
            per_host = (
                await conn.execute(
                    text("""SELECT s.host_id, u.f, sum(u.c) FILTER (WHERE NOT u.i) FROM sample_intervals s,
                        unnest(s.function_ids, s.counts, s.idles) AS u(f, c, i)
                    WHERE s.host_id = ANY(:h) AND s.ts >= :lo AND s.ts < :hi GROUP BY 1, 2"""),
                    {"h": hosts, "lo": lo, "hi": hi},
                )
            ).all()
        functions: dict[int, dict] = {}
        for host, fid, s in per_host:
            if not s:
                continue
            f = functions.setdefault(fid, {"samples": 0, "hot_hosts": 0, "cells": set()})
            f["samples"] += int(s)
            f["hot_hosts"] += int(busy.get(host, 0) > 0 and s >= MIN_SHARE * busy[host])
            f["cells"].add((host, int(s)))
        return {h: busy.get(h, 0) for h in hosts}, functions


def _answer_as_raw(answer: dict) -> tuple[dict, dict]:
    busy = {h["id"]: h["busy_samples"] for h in answer["hosts"]}
    functions = {
        i["function_id"]: {
            "samples": i["samples"],
            "hot_hosts": i["hot_hosts"],
            "cells": {(c["host_id"], c["samples"]) for c in i["cells"]},
        }
        for i in answer["items"]
    }
    return busy, functions


async def _hot_code(sessionmaker, lo: datetime, hi: datetime, labels: dict[str, str] | None = None) -> dict:
    async with sessionmaker() as session:
        return await fleet.hot_code(session, GROUP, labels or {}, TimeRange(lo, hi), MIN_SHARE, 500, 0, "samples", True)


async def test_hot_code_from_function_rollups_equals_the_raw_sums(rollup_db):
    engine = make_engine(rollup_db)
    sessionmaker = make_sessionmaker(engine)
    try:
        await partitions.ensure(engine, T0, timedelta(hours=1), timedelta(days=1), raw_ahead=timedelta(hours=6))
        async with sessionmaker() as session:
            session.add(CatalogPiece(digest="d" * 64, module="vmlinux", function_count=30, block_count=60))
            await session.flush()
            for i in range(30):
                session.add(
                    Function(digest="d" * 64, index=i, name=f"fn_{i:02d}", offset=64 * i, size=64, block_count=2)
                )
            for host, labels in HOSTS.items():
                session.add(
                    Host(
                        id=host,
                        hostname=host,
                        kernel_release=RELEASE,
                        kernel_build_id=BUILD if host != "other" else "cd" * 20,
                        status="active",
                        connected_at=T0,
                        labels=labels,
                    )
                )
            await session.commit()
            fids = [r[0] for r in await session.execute(text("SELECT id FROM functions ORDER BY index"))]
            await session.execute(
                text("UPDATE series_state SET watermark_1m = :t, watermark_1h = :t WHERE name = 'rollups'"),
                {"t": T0},
            )
            await session.commit()
        f = Fleet(engine, fids)

        # Intervals the rollup task sums, then late ones into what it summed, twice, across hours.
        await f.store(f.intervals(T0, T0 + timedelta(minutes=100), 20), late=False)
        await f.roll(T0 + timedelta(minutes=100))  # minutes to 11:40, hours to 11:00
        await f.store(f.intervals(T0 + timedelta(minutes=3), T0 + timedelta(minutes=95), 90), late=True)
        await f.store(f.intervals(T0 + timedelta(minutes=100), T0 + timedelta(minutes=160), 20), late=False)
        await f.roll(T0 + timedelta(minutes=160))  # minutes to 12:40, hours to 12:00
        # Late again: into hours already summed, and into 12:00-12:40 (minutes and ten minutes summed, the
        # hour not yet: the rollup task's hour pass adds them from the ten minutes below).
        await f.store(f.intervals(T0 + timedelta(seconds=1), T0 + timedelta(minutes=159), 150), late=True)

        group_hosts = ["g1", "g2", "g3"]
        ranges = [
            (T0, T0 + timedelta(hours=2), {"1h"}),
            (T0 + timedelta(minutes=47), T0 + timedelta(minutes=107), {"1m", "10m"}),
            (T0 + timedelta(minutes=7, seconds=30), T0 + timedelta(minutes=153, seconds=10), {"1m", "10m", "1h"}),
            (T0 - timedelta(minutes=30), T0 + timedelta(hours=4), {"1h", "10m"}),
            (T0 + timedelta(minutes=80), T0 + timedelta(minutes=110), {"10m"}),
            (T0 + timedelta(minutes=1), T0 + timedelta(minutes=9), {"1m"}),
        ]

        async def check(lo: datetime, hi: datetime, grains: set[str], labels=None, hosts=group_hosts) -> dict:
            answer = await _hot_code(sessionmaker, lo, hi, labels)
            assert {s["grain"] for s in answer["rollups"]} == grains, (lo, hi, answer["rollups"])
            covered = (answer["covered_from"], answer["covered_to"])
            async with engine.connect() as conn:
                wm_1m, _ = await rollups.watermarks(conn)
            first = _minute(lo) if lo == _minute(lo) else _minute(lo) + timedelta(minutes=1)
            assert covered == (first, min(_minute(hi), wm_1m)), (lo, hi)
            busy, functions = await f.raw_answer(covered[0], covered[1], hosts)
            assert functions, (lo, hi)
            assert _answer_as_raw(answer) == (busy, functions), (lo, hi)
            assert answer["functions"] == len(functions)
            return answer

        answers = {(lo, hi): await check(lo, hi, grains) for lo, hi, grains in ranges}
        await check(*ranges[2][:2], {"1m", "10m", "1h"}, labels={"role": "db"}, hosts=["g1", "g2"])

        # The hour pass: 12:00-13:00 summed from its ten minutes, late rows of 12:00-12:40 included.
        await f.store(f.intervals(T0 + timedelta(minutes=160), T0 + timedelta(minutes=180), 20), late=False)
        await f.roll(T0 + timedelta(minutes=180))
        await check(T0 + timedelta(hours=2), T0 + timedelta(hours=3), {"1h"})
        await check(T0, T0 + timedelta(hours=3), {"1h"})
        await check(T0 + timedelta(minutes=47), T0 + timedelta(minutes=167), {"1m", "10m", "1h"})

        # Nothing else is read: without the block rollups and the raw rows, the answers stay.
        async with engine.begin() as conn:
            await conn.execute(text("TRUNCATE sample_blocks_1m, sample_blocks_1h, sample_intervals"))
        for (lo, hi), before in answers.items():
            if hi <= T0 + timedelta(minutes=160):
                after = await _hot_code(sessionmaker, lo, hi)
                assert after["items"] == before["items"] and after["hosts"] == before["hosts"]
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
def arrays_db(postgres_url):
    url = _recreate_database(postgres_url, "hotpath_function_arrays")
    upgrade_database(url)
    return url


async def _fleet_from_t0(engine) -> Fleet:
    """Partitions around T0, the rollup watermarks at T0, and the test fleet over functions 101..130."""
    await partitions.ensure(engine, T0, timedelta(hours=1), timedelta(days=1), raw_ahead=timedelta(hours=6))
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE series_state SET watermark_1m = :t, watermark_1h = :t WHERE name = 'rollups'"), {"t": T0}
        )
    return Fleet(engine, list(range(101, 131)))


async def test_function_rollup_rows_are_sorted_arrays_equal_to_the_raw_sums(arrays_db):
    """Each per-function rollup row (migration 0017) is one host's bucket: function ids ascending and each
    once, busy and idle samples beside them, equal to the raw sums of that host and bucket, after the rollup
    task's passes and after late rows merged into rows already written (minutes, ten minutes, hours)."""
    engine = make_engine(arrays_db)
    try:
        f = await _fleet_from_t0(engine)
        await f.store(f.intervals(T0, T0 + timedelta(minutes=75), 20), late=False)
        await f.roll(T0 + timedelta(minutes=75))  # minutes to 11:15, hours to 11:00
        await f.store(f.intervals(T0 + timedelta(minutes=2), T0 + timedelta(minutes=74), 40), late=True)
        await f.store(f.intervals(T0 + timedelta(minutes=75), T0 + timedelta(minutes=95), 20), late=False)
        await f.roll(T0 + timedelta(minutes=95))
        await f.store(f.intervals(T0 + timedelta(seconds=3), T0 + timedelta(minutes=94), 70), late=True)
        async with engine.connect() as conn:
            wm_1m, wm_1h = await rollups.watermarks(conn)
            for grain, bucket, below in (
                ("1m", "date_trunc('minute', s.ts)", wm_1m),
                ("10m", "date_bin('10 minutes', s.ts, TIMESTAMPTZ '2000-01-01 00:00:00+00')", wm_1m),
                ("1h", "date_trunc('hour', s.ts)", wm_1h),
            ):
                raw: dict[tuple, dict[int, tuple[int, int]]] = {}
                for host, b, fid, busy, idle in await conn.execute(
                    text(f"""SELECT s.host_id, {bucket}, u.f, coalesce(sum(u.c) FILTER (WHERE NOT u.i), 0),
                               coalesce(sum(u.c) FILTER (WHERE u.i), 0)
                        FROM sample_intervals s, unnest(s.function_ids, s.counts, s.idles) AS u(f, c, i)
                        WHERE s.ts < :below GROUP BY 1, 2, 3"""),
                    {"below": below},
                ):
                    raw.setdefault((host, b), {})[fid] = (int(busy), int(idle))
                rolled: dict[tuple, dict[int, tuple[int, int]]] = {}
                rows = f"SELECT host_id, bucket, function_ids, busy_counts, idle_counts FROM sample_functions_{grain}"
                for host, b, ids, busy, idle in await conn.execute(text(rows)):
                    assert ids == sorted(set(ids)) and len(busy) == len(ids) == len(idle), (grain, host, b)
                    rolled[(host, b)] = {fid: (c, i) for fid, c, i in zip(ids, busy, idle, strict=True)}
                assert len(raw) >= len(HOSTS), grain  # every host, in every bucket below the watermark
                assert rolled == raw, grain
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
def running_db(postgres_url):
    url = _recreate_database(postgres_url, "hotpath_function_running")
    upgrade_database(url)
    return url


async def test_running_totals_equal_the_raw_sums_of_their_hour_so_far(running_db):
    """Each running-total row (migration 0018), (host, ten minutes b), equals the host's raw sums per function
    from b's hour start to b's end, for every ten minutes wholly below the minute watermark from the host's
    first samples of the hour on (and no other rows), after the rollup task's passes and after late rows
    merged into running rows already written and into ten minutes of a host that had none in its hour."""
    engine = make_engine(running_db)
    try:
        f = await _fleet_from_t0(engine)
        # g3 sends nothing before 10:30 on time: its first ten minutes of the 10:00 hour come late.
        first = f.intervals(T0, T0 + timedelta(minutes=75), 20)
        await f.store([r for r in first if r.host_id != "g3" or r.ts >= T0 + timedelta(minutes=30)], late=False)
        await f.roll(T0 + timedelta(minutes=75))  # ten minutes closed to 11:10
        await f.store(f.intervals(T0 + timedelta(minutes=2), T0 + timedelta(minutes=74), 40), late=True)
        await f.store(f.intervals(T0 + timedelta(minutes=75), T0 + timedelta(minutes=95), 20), late=False)
        await f.roll(T0 + timedelta(minutes=95))  # closed to 11:30; 11:30-11:35 summed, not closed
        await f.store(f.intervals(T0 + timedelta(seconds=3), T0 + timedelta(minutes=94), 70), late=True)
        async with engine.connect() as conn:
            wm_1m, _ = await rollups.watermarks(conn)
            closed = wm_1m.replace(minute=wm_1m.minute // 10 * 10)
            raw: dict[tuple, dict[int, list[int]]] = {}
            for host, ts, ids, counts, idles in await conn.execute(
                text("SELECT host_id, ts, function_ids, counts, idles FROM sample_intervals")
            ):
                ts = ts.astimezone(UTC)
                b = ts.replace(minute=ts.minute // 10 * 10, second=0, microsecond=0)
                while b < min(closed, ts.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)):
                    sums = raw.setdefault((host, b), {})
                    for fid, c, idle in zip(ids, counts, idles, strict=True):
                        s = sums.setdefault(fid, [0, 0])
                        s[1 if idle else 0] += c
                    b += timedelta(minutes=10)
            running: dict[tuple, dict[int, list[int]]] = {}
            for host, b, ids, busy, idle in await conn.execute(
                text(f"SELECT host_id, bucket, function_ids, busy_counts, idle_counts FROM {rollups.RUNNING}")
            ):
                assert ids == sorted(set(ids)) and len(busy) == len(ids) == len(idle), (host, b)
                running[(host, b.astimezone(UTC))] = {fid: [c, i] for fid, c, i in zip(ids, busy, idle, strict=True)}
        assert (("g3", T0) in running) and len(raw) == len(HOSTS) * 9  # 10:00-11:30, every host
        assert running == raw
    finally:
        await engine.dispose()


def test_an_hours_minutes_are_read_as_few_rows_that_do_not_change_as_the_rollups_advance():
    """`fleet._within_hour` picks the cheapest signed rows of one host for an hour's minutes: an hour ending
    two minutes short of closed ten minutes is their running total less two minutes; while those ten minutes
    are open (the watermark inside them) their minutes are read one by one, never the growing ten-minute row;
    a short stretch stays minutes."""
    h = datetime(2002, 3, 4, 1, 0, tzinfo=UTC)

    def m(k: int) -> datetime:
        return h + timedelta(minutes=k)

    assert fleet._within_hour(h, m(58), m(65)) == {("run", m(50)): 1, ("1m", m(58)): -1, ("1m", m(59)): -1}
    assert fleet._within_hour(h, m(58), m(58)) == {("run", m(40)): 1, **{("1m", m(k)): 1 for k in range(50, 58)}}
    assert fleet._within_hour(m(58), m(60), m(65)) == {("1m", m(58)): 1, ("1m", m(59)): 1}
    assert fleet._within_hour(m(20), m(60), m(65)) == {("run", m(50)): 1, ("run", m(10)): -1}
