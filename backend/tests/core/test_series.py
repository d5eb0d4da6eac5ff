# SPDX-License-Identifier: Apache-2.0
"""The series' storage on the real Postgres: partitions are created ahead and dropped whole (no row is
deleted), the range planner cuts ranges into hour, minute and raw spans, the rollups equal the raw
sums (for data the rollup task sums and for data that arrives late, below the watermarks), and the
routes' answers are the same whichever spans a range is read from."""

import asyncio
import itertools
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from app.storage import samples
from app.storage.ingest import Item, PointRow, SampleRow
from app.storage.series import partitions, rollups
from app.storage.series.layout import SLOTS
from tests.scripted_agent import wait_until

T0 = datetime(2001, 1, 1, 12, 0, tzinfo=UTC)


async def _partitions(engine, table):
    async with engine.connect() as conn:
        return await partitions.existing(conn, table)


async def test_partitions_are_created_ahead_and_dropped_whole(backend):
    engine = backend.runtime.engine
    created = await partitions.ensure(engine, T0, timedelta(hours=2), timedelta(days=1))
    assert created >= 5
    raw = [p for p in await _partitions(engine, "sample_intervals") if p.startswith("sample_intervals_p2001")]
    assert raw == [f"sample_intervals_p20010101{h:02d}" for h in range(10, 15)]  # 2 h back, until 3 h ahead
    for table in ("sample_blocks_1m", "sample_functions_1m", "sample_functions_10m", "sample_functions_1h"):
        daily = [p[len(table) :] for p in await _partitions(engine, table) if "_p200" in p]
        assert daily == ["_p20001231", "_p20010101", "_p20010102", "_p20010103"], table
    daily = [p for p in await _partitions(engine, "sample_blocks_1m") if "_p200" in p]
    assert daily == [
        "sample_blocks_1m_p20001231",
        "sample_blocks_1m_p20010101",
        "sample_blocks_1m_p20010102",
        "sample_blocks_1m_p20010103",
    ]
    assert await partitions.ensure(engine, T0, timedelta(hours=2), timedelta(days=1)) == 0, "idempotent"
    async with engine.begin() as conn:
        await conn.execute(
            text("""
            INSERT INTO sample_intervals (host_id, ts, interval_ms, total_samples, user_samples, unmapped_samples,
                lost_samples, dropped_samples, idle_samples, function_ids, block_offsets, counts, batch)
            VALUES ('old', :ts, 1000, 1, 0, 0, 0, 0, 0, '{1}', '{0}', '{1}', 0)"""),
            {"ts": T0 - timedelta(hours=1)},
        )
        # Postgres puts the row in the partition of its hour.
        where = (
            await conn.execute(text("SELECT tableoid::regclass::text FROM sample_intervals WHERE host_id = 'old'"))
        ).scalar_one()
        assert where == "sample_intervals_p2001010111"
    _dropped, rows = await partitions.drop_expired(
        engine, T0 + timedelta(days=1), timedelta(hours=12), timedelta(hours=36)
    )
    assert rows == 1
    assert not [p for p in await _partitions(engine, "sample_intervals") if p.startswith("sample_intervals_p2001")]
    assert [p for p in await _partitions(engine, "sample_blocks_1m") if "_p200" in p] == [
        "sample_blocks_1m_p20010101",
        "sample_blocks_1m_p20010102",
        "sample_blocks_1m_p20010103",
    ]
    # The present's partitions are untouched, and nothing was deleted row by row.
    assert any(
        p.startswith(f"sample_intervals_p{datetime.now(UTC):%Y%m%d}")
        for p in await _partitions(engine, "sample_intervals")
    )
    for table in (
        "sample_blocks_1m",
        "sample_blocks_1h",
        "sample_totals_1m",
        "sample_totals_1h",
        "measurement_points_1m",
        "measurement_points_1h",
        "measurement_points",
        "sample_functions_1m",
        "sample_functions_10m",
        "sample_functions_1h",
    ):
        await partitions.drop_expired(engine, T0 + timedelta(days=5), timedelta(hours=1), timedelta(hours=1))
        assert not [p for p in await _partitions(engine, table) if "_p200" in p]


async def _waiting_on(engine, table):
    """Whether some session waits for a lock on `table` (its name: partitions lock their parent)."""
    async with engine.connect() as conn:
        q = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = CAST(:t AS regclass)"
        return (await conn.execute(text(q), {"t": table})).scalar_one() > 0


@pytest.mark.parametrize("job", ["ensure", "drop_expired"])
async def test_partition_maintenance_cannot_deadlock_with_a_rollup(backend, job):
    """A rollup's INSERT INTO stack_samples_1m SELECT ... FROM stack_samples locks the rollup table and
    then the raw one; maintenance walks the raw tables first. Were all of maintenance one transaction,
    its lock on a raw parent would be held while it waits for the rollup table, and the rollup waiting
    for the raw one would make a deadlock: Postgres ends one of them (seen as a failed run of the test
    above while the backend's own tasks ran). Each table is its own transaction, so both go through."""
    engine = backend.runtime.engine
    when = datetime(2003, 6, 1, 12, 0, tzinfo=UTC)
    if job == "drop_expired":  # partitions for it to drop, made before the rollup holds its lock
        await partitions.ensure(engine, when, timedelta(hours=2), timedelta(days=1))
    async with engine.connect() as rollup:
        tx = await rollup.begin()
        await rollup.execute(text("SET LOCAL statement_timeout = '60s'"))
        await rollup.execute(text("LOCK TABLE stack_samples_1m IN ROW EXCLUSIVE MODE"))
        if job == "ensure":
            work = asyncio.create_task(
                partitions.ensure(engine, when + timedelta(days=400), timedelta(hours=2), timedelta(days=1))
            )
        else:
            work = asyncio.create_task(
                partitions.drop_expired(engine, when + timedelta(days=5), timedelta(hours=1), timedelta(hours=1))
            )
        await wait_until(lambda: _waiting_on(engine, "stack_samples_1m"), timeout=30)
        assert not work.done()
        # The rollup reads the raw table maintenance has been through: no lock of it may still be held.
        await rollup.execute(text("SELECT count(*) FROM stack_samples"))
        await tx.commit()
    await asyncio.wait_for(work, 60)


def test_the_planner_reads_whole_hours_and_minutes_from_rollups_and_the_edges_raw():
    wm_1m = datetime(2026, 5, 1, 15, 42, tzinfo=UTC)
    wm_1h = datetime(2026, 5, 1, 15, 0, tzinfo=UTC)
    start = datetime(2026, 5, 1, 12, 30, 30, tzinfo=UTC)
    end = datetime(2026, 5, 1, 15, 50, 10, tzinfo=UTC)
    got = samples.plan(start, end, wm_1m, wm_1h)
    h = lambda hh, mm=0, ss=0: datetime(2026, 5, 1, hh, mm, ss, tzinfo=UTC)  # noqa: E731
    assert got == [
        ("1h", h(13), h(15)),
        ("1m", h(12, 31), h(13)),
        ("1m", h(15), h(15, 42)),
        ("raw", start, h(12, 31)),
        ("raw", h(15, 42), end),
    ]
    spans = sorted((lo, hi) for _, lo, hi in got)
    assert spans[0][0] == start and spans[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans)), "the spans tile the range"
    # A 30 s bucket cannot come from minute rollups; a 2-minute one cannot come from hours.
    assert samples.plan(start, end, wm_1m, wm_1h, grain=timedelta(seconds=30)) == [("raw", start, end)]
    assert {s for s, _, _ in samples.plan(start, end, wm_1m, wm_1h, grain=timedelta(minutes=2))} == {"1m", "raw"}
    # Below the watermarks nothing is rolled up yet: raw.
    assert samples.plan(start, end, start - timedelta(hours=5), start - timedelta(hours=5)) == [("raw", start, end)]


async def _write(backend, host_id, rows: list[tuple[datetime, list[tuple[int, int, int]]]], points=None) -> None:
    items = []
    for ts, blocks in rows:
        items.append(
            Item(
                host_id=host_id,
                samples=SampleRow(
                    host_id=host_id,
                    ts=ts,
                    interval_ms=1000,
                    totals=(sum(b[2] for b in blocks) + 1, 1, 0, 0, 0, 0),
                    function_ids=[b[0] for b in blocks],
                    block_offsets=[b[1] for b in blocks],
                    counts=[b[2] for b in blocks],
                ),
            )
        )
    for p in points or []:
        items.append(Item(host_id=host_id, points=p))
    for it in items:
        await backend.runtime.writer.write(it)


async def _raw_vs_rollups(backend, host_id, grain):
    async with backend.runtime.engine.connect() as conn:
        trunc = "minute" if grain == "1m" else "hour"
        wm = (await rollups.watermarks(conn))[0 if grain == "1m" else 1]
        raw = {
            (r[0], r[1], r[2]): r[3]
            for r in await conn.execute(
                text(f"""
            SELECT date_trunc('{trunc}', s.ts), u.f, u.o, sum(u.c) FROM sample_intervals s,
                   unnest(s.function_ids, s.block_offsets, s.counts) AS u(f, o, c)
            WHERE s.host_id = :h AND s.ts < :wm GROUP BY 1, 2, 3"""),
                {"h": host_id, "wm": wm},
            )
        }
        rolled = {
            (r[0], r[1], r[2]): r[3]
            for r in await conn.execute(
                text(f"""
            SELECT bucket, function_id, block_offset, count FROM sample_blocks_{grain}
            WHERE host_id = :h"""),
                {"h": host_id},
            )
        }
        raw_totals = {
            r[0]: tuple(r[1:])
            for r in await conn.execute(
                text(f"""
            SELECT date_trunc('{trunc}', ts), sum(total_samples), sum(user_samples), sum(interval_ms)
            FROM sample_intervals WHERE host_id = :h AND ts < :wm GROUP BY 1"""),
                {"h": host_id, "wm": wm},
            )
        }
        rolled_totals = {
            r[0]: tuple(r[1:])
            for r in await conn.execute(
                text(f"""
            SELECT bucket, total_samples, user_samples, covered_ms FROM sample_totals_{grain}
            WHERE host_id = :h"""),
                {"h": host_id},
            )
        }
    return raw, rolled, raw_totals, rolled_totals


async def test_rollups_equal_the_raw_sums_for_late_and_current_data(backend, unique):
    host_id = f"roll-{unique}"
    engine = backend.runtime.engine
    await rollups.run_once(engine)  # whatever other tests left, summed first
    now = datetime.now(UTC).replace(microsecond=0)
    # Late data: hours before the watermarks (an agent resending after a long disconnect).
    late_start = (now - timedelta(hours=3)).replace(minute=58, second=30)
    late = [
        (late_start + timedelta(seconds=15 * i), [(10 + i % 3, 0x10 * (i % 2), i + 1), (99, 0, 2)]) for i in range(20)
    ]
    await _write(backend, host_id, late)
    # Current data, then the rollup task catches up with it.
    cur_start = now - timedelta(minutes=3)
    current = [(cur_start + timedelta(seconds=10 * i), [(10, 0, 5), (11, 0x10, i)]) for i in range(12)]
    await _write(backend, host_id, current)
    await rollups.run_once(engine, now=now + timedelta(minutes=2), lag_s=0)
    for grain in ("1m", "1h"):
        raw, rolled, raw_totals, rolled_totals = await _raw_vs_rollups(backend, host_id, grain)
        assert raw and rolled == raw, grain
        assert rolled_totals == raw_totals, grain
    # Data arriving late again, into buckets already summed, is added once.
    await _write(backend, host_id, [(late_start + timedelta(seconds=5), [(10, 0, 1000)])])
    raw, rolled, _, _ = await _raw_vs_rollups(backend, host_id, "1m")
    assert rolled == raw
    bucket = late_start.replace(second=0)
    before = sum(
        c for ts, blocks in late for f, o, c in blocks if ts.replace(second=0) == bucket and f == 10 and o == 0
    )
    assert rolled[(bucket, 10, 0)] == before + 1000


async def test_routes_answer_the_same_from_rollups_as_from_raw_rows(backend, client, unique):
    """Top functions, per-block counts and the timeline over a range that the planner reads partly from
    the hour and minute rollups equal the sums computed from the raw rows alone."""
    host_id = f"same-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"same-{unique}")
    await agent.connect()

    async def stored():
        async with backend.runtime.sessionmaker() as s:
            return [
                r[0]
                for r in await s.execute(
                    text("""
                SELECT f.id FROM functions f JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :h
                ORDER BY f.index LIMIT 3"""),
                    {"h": host_id},
                )
            ]

    fids = await wait_until(stored)
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - timedelta(hours=2, minutes=17, seconds=12)
    rows = [(start + timedelta(seconds=37 * i), [(fids[i % 3], 0x10 * (i % 3), 1 + i % 5)]) for i in range(200)]
    await _write(backend, host_id, rows)
    await rollups.run_once(backend.runtime.engine)
    lo, hi = start - timedelta(seconds=3), start + timedelta(seconds=37 * 200)
    q = {"from": lo.isoformat(), "to": hi.isoformat()}
    top = (await client.get(f"/api/v1/hosts/{host_id}/top-functions", params=q)).json()
    expected: dict[int, int] = {}
    for _ts, blocks in rows:
        for fid, _off, c in blocks:
            expected[fid] = expected.get(fid, 0) + c
    assert {i["function_id"]: i["samples"] for i in top["items"]} == expected
    assert top["total_samples"] == sum(expected.values()) + len(rows)
    async with backend.runtime.sessionmaker() as s:
        wm_1m, wm_1h = await rollups.watermarks(await s.connection())
    assert {src for src, _, _ in samples.plan(lo, hi, wm_1m, wm_1h)} >= {"1m", "raw"}
    blocks = (await client.get(f"/api/v1/hosts/{host_id}/functions/{fids[1]}/samples", params=q)).json()
    assert {b["offset"]: b["samples"] for b in blocks["blocks"]} == {0x10: expected[fids[1]]}
    tl = (await client.get(f"/api/v1/hosts/{host_id}/timeline", params={**q, "points": 30})).json()
    assert sum(p["total"] for p in tl["points"]) == top["total_samples"] and tl["step_s"] >= 60
    await agent.close()


async def test_late_intervals_of_one_commit_are_summed_from_their_rows_with_every_total(backend, unique):
    """The writer sums late intervals into the rollups from the rows it has just written (not by reading the
    raw table back): two hosts in one commit, a block twice in one bucket, idle entries and every total
    column, and all of it equal to the raw sums afterwards."""
    from app.storage.series.layout import TOTALS

    hosts = [f"late1-{unique}", f"late2-{unique}"]
    engine = backend.runtime.engine
    await rollups.run_once(engine)
    start = (datetime.now(UTC) - timedelta(hours=2)).replace(minute=59, second=20, microsecond=0)
    futures = []
    for k, host_id in enumerate(hosts):
        for i in range(8):  # 59:20 to 60:30: two minutes and two hours
            row = SampleRow(
                host_id=host_id,
                ts=start + timedelta(seconds=10 * i),
                interval_ms=1000 + i,
                totals=(100 + i, 10 + k, 3, 2, 1, 7 + i),
                function_ids=[5, 5, 6],
                block_offsets=[0, 0, 0x10],
                counts=[4 + i, 2, 9 + k],
                idles=[False, True, False],
                stack_samples=20 + i,
                stack_dropped=i % 2,
            )
            futures.append(await backend.runtime.writer.submit(Item(host_id=host_id, samples=row)))
    await asyncio.gather(*futures)
    async with engine.connect() as conn:
        _, wm_1h = await rollups.watermarks(conn)
        assert start + timedelta(minutes=2) < wm_1h  # both hours are below the watermarks: late
        for grain in ("1m", "1h"):
            trunc = "minute" if grain == "1m" else "hour"
            sums = ", ".join(f"sum({c})" for c in TOTALS)
            raw_blocks = set(
                (
                    await conn.execute(
                        text(f"""
                SELECT s.host_id, date_trunc('{trunc}', s.ts), u.f, u.o, sum(u.c),
                       coalesce(sum(u.c) FILTER (WHERE u.i), 0)
                FROM sample_intervals s, unnest(s.function_ids, s.block_offsets, s.counts, s.idles) AS u(f, o, c, i)
                WHERE s.host_id = ANY(:h) GROUP BY 1, 2, 3, 4"""),
                        {"h": hosts},
                    )
                ).all()
            )
            rolled_blocks = set(
                (
                    await conn.execute(
                        text(f"""SELECT host_id, bucket, function_id, block_offset, count, idle_count
                        FROM sample_blocks_{grain} WHERE host_id = ANY(:h)"""),
                        {"h": hosts},
                    )
                ).all()
            )
            raw_totals = set(
                (
                    await conn.execute(
                        text(f"""SELECT host_id, date_trunc('{trunc}', ts), sum(interval_ms), {sums}
                        FROM sample_intervals WHERE host_id = ANY(:h) GROUP BY 1, 2"""),
                        {"h": hosts},
                    )
                ).all()
            )
            rolled_totals = set(
                (
                    await conn.execute(
                        text(f"""SELECT host_id, bucket, covered_ms, {", ".join(TOTALS)}
                        FROM sample_totals_{grain} WHERE host_id = ANY(:h)"""),
                        {"h": hosts},
                    )
                ).all()
            )
            assert len(raw_blocks) == 8  # two hosts, two buckets, blocks (5, 0) and (6, 0x10)
            assert rolled_blocks == raw_blocks, grain
            assert rolled_totals == raw_totals, grain
            assert {r[1] for r in rolled_totals} == {
                start.replace(second=0) if grain == "1m" else start.replace(minute=0, second=0),
                (start + timedelta(minutes=1)).replace(second=0)
                if grain == "1m"
                else (start + timedelta(hours=1)).replace(minute=0, second=0),
            }


async def test_measurement_rollups_keep_every_slot_and_the_measured_seconds(backend, unique):
    host_id = f"mroll-{unique}"
    engine = backend.runtime.engine
    async with engine.begin() as conn:
        await conn.execute(
            text("INSERT INTO hosts (id, hostname) VALUES (:h, 'x') ON CONFLICT DO NOTHING"), {"h": host_id}
        )
    mid = str(uuid.uuid4())
    start = (datetime.now(UTC) - timedelta(hours=2)).replace(second=0, microsecond=0)
    nslots = len(SLOTS)
    pts = []
    for i in range(90):
        vals = [float(i), float(10 * i), None, None, None, None, None, float(i), None]  # count, wall, exits
        vals2 = [1.0] + [None] * (nslots - 1)
        pts.append(
            PointRow(
                host_id=host_id,
                measurement_id=mid,
                ts=start + timedelta(seconds=i),
                seconds=1.0,
                state=2,
                resources=[0, 3],
                vals=vals + vals2,
            )
        )
    await _write(backend, host_id, [], pts)
    await rollups.run_once(engine)
    r = samples.TimeRange(start, start + timedelta(seconds=90))
    async with backend.runtime.sessionmaker() as s:
        values = await samples.measurement_values(s, mid, r)
        wm = await rollups.watermarks(await s.connection())
        assert {src for src, _, _ in samples.plan(r.start, r.end, *wm)} == {"1m", "raw"}
    per = {v["resource"]: v["values"] for v in values["resources"]}
    assert per[0]["count"] == sum(range(90)) and per[0]["wall_ns"] == 10 * sum(range(90))
    assert per[0]["vtime_ns"] is None and per[0]["exits"] == sum(range(90))
    assert per[3]["count"] == 90
    assert values["measured_seconds"] == pytest.approx(90.0) and values["intervals"] == 90


async def test_rows_written_as_copy_text_read_back_exactly_whatever_their_text(backend, unique):
    """The writer builds COPY text itself (app.storage.series.copytext): command names with quotes, backslashes,
    tabs, commas, braces, NULL-like words and non-ASCII, long arrays, idle flags, instruction counts and
    missing measurement values all read back as written."""
    from app.protocol.stack_defs import BatchStacks

    host = f"copy-{unique}"
    ts = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    comms = ['a"b', "back\\slash", "tab\there", "com,ma", "{brace}", "NULL", "ünï", "new\nline", ""]
    stacks = BatchStacks(rows=[(7 + i, 2, [1, -1], [c, "x"], [0, 1], [1, 1]) for i, c in enumerate(comms)])
    n = 5000
    row = SampleRow(
        host_id=host,
        ts=ts,
        interval_ms=1000,
        totals=(3 * n, 0, 0, 0, 0, n),
        function_ids=list(range(n)),
        block_offsets=[i % 64 for i in range(n)],
        counts=[3] * n,
        idles=[i % 3 == 0 for i in range(n)],
        insn_index=[1, 1, n],
        insn_offsets=[0, 4, 2],
        insn_counts=[1, 2, 3],
        idle_by_context=True,
        stack_samples=2 * len(comms),
    )
    mid = f"m-{unique}"
    vals = [1.5, None, 2e18, 0.1] + [None] * (len(SLOTS) - 4)
    await backend.runtime.writer.write(Item(host_id=host, samples=row, stacks=stacks))
    await backend.runtime.writer.write(
        Item(
            host_id=host,
            points=PointRow(host_id=host, measurement_id=mid, ts=ts, seconds=1.25, state=2, resources=[0], vals=vals),
        )
    )
    async with backend.runtime.engine.connect() as conn:
        got = (
            await conn.execute(
                text("""
            SELECT function_ids, block_offsets, counts, idles, insn_index, insn_offsets, insn_counts, idle_samples,
                   idle_by_context, stack_samples FROM sample_intervals WHERE host_id = :h"""),
                {"h": host},
            )
        ).one()
        stored = (
            await conn.execute(
                text("""
            SELECT stack_id, comms, pids FROM stack_samples WHERE host_id = :h ORDER BY stack_id"""),
                {"h": host},
            )
        ).all()
        point = (
            await conn.execute(
                text("SELECT seconds, vals FROM measurement_points WHERE measurement_id = :m"), {"m": mid}
            )
        ).one()
    assert got.function_ids == list(range(n)) and got.counts == [3] * n
    assert got.idles == [i % 3 == 0 for i in range(n)]
    assert (got.insn_index, got.insn_offsets, got.insn_counts) == ([1, 1, n], [0, 4, 2], [1, 2, 3])
    assert got.idle_samples == n and got.idle_by_context and got.stack_samples == 2 * len(comms)
    assert [r.comms for r in stored] == [[c, "x"] for c in comms]
    assert all(r.pids == [1, -1] for r in stored)
    assert point.seconds == 1.25 and point.vals == vals


async def test_stack_rollups_equal_the_raw_sums_for_late_and_current_stacks(backend, unique):
    """The call stacks' minute and ten-minute rollups hold the raw rows' sums per (bucket, stack, pid, command,
    CPU): for stacks the rollup task sums (the ten minutes from the minutes it has just summed, into buckets
    summed before) and for stacks arriving below the watermark (the writer)."""
    from app.protocol.stack_defs import BatchStacks

    host_id = f"rstk-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"rstk-{unique}")  # a host of a kernel build of its own
    await agent.connect()
    await agent.close()
    engine = backend.runtime.engine
    await rollups.run_once(engine)  # whatever other tests left, summed first
    now = datetime.now(UTC).replace(microsecond=0)

    async def write(ts: datetime, i: int) -> None:
        rows = [(5, i + 2, [1, 2], ["a", "b"], [0, 1], [i + 1, 1]), (6 + i % 2, 3, [1], ["a"], [i % 4], [3])]
        await backend.runtime.writer.write(
            Item(
                host_id=host_id,
                samples=SampleRow(
                    host_id=host_id,
                    ts=ts,
                    interval_ms=1000,
                    totals=(1, 0, 0, 0, 0, 0),
                    function_ids=[],
                    block_offsets=[],
                    counts=[],
                ),
                stacks=BatchStacks(rows=rows),
            )
        )

    late_start = (now - timedelta(hours=3)).replace(minute=8, second=30)
    for i in range(20):  # late: 08:30 to 13:15 of an hour three hours back, over two ten-minute buckets
        await write(late_start + timedelta(seconds=15 * i), i)
    async with engine.connect() as conn:
        wm_1m, _ = await rollups.watermarks(conn)
    for i in range(12):  # current: three minutes above the watermark, summed by the rollup task
        await write(wm_1m + timedelta(seconds=15 * i), i)
    await rollups.run_once(engine, now=wm_1m + timedelta(minutes=4), lag_s=0)
    for i in range(3):  # late again, into buckets already summed
        await write(late_start + timedelta(seconds=5 + 60 * i), 7)

    async with engine.connect() as conn:
        ten = "date_bin('10 minutes', s.ts, TIMESTAMPTZ '2000-01-01 00:00:00+00')"
        for table, bucket in (("stack_samples_1m", "date_trunc('minute', s.ts)"), ("stack_samples_10m", ten)):
            raw = {
                tuple(r[:5]): r[5]
                for r in await conn.execute(
                    text(f"""
                SELECT {bucket}, s.stack_id, u.pid, u.comm, u.cpu, sum(u.n)
                FROM stack_samples s, unnest(s.pids, s.comms, s.cpus, s.counts) AS u(pid, comm, cpu, n)
                WHERE s.host_id = :h GROUP BY 1, 2, 3, 4, 5"""),
                    {"h": host_id},
                )
            }
            rolled = {
                tuple(r[:5]): r[5]
                for r in await conn.execute(
                    text(f"""
                SELECT bucket, stack_id, pid, comm, cpu, count FROM {table} WHERE host_id = :h"""),
                    {"h": host_id},
                )
            }
            assert raw and rolled == raw, table
        # The kernel-build group's rollup and the host's part of it: the same sums per (bucket, stack, idle or
        # not) and per (bucket, idle or not), under the host's group (a build of its own: no other host's).
        group = (await rollups.host_groups(conn, [host_id]))[host_id]
        for grain, bucket in (("1m", "date_trunc('minute', s.ts)"), ("10m", ten)):
            raw_sums = f"""
                SELECT {bucket} AS b, s.stack_id AS id, u.pid = 0 AS idle, sum(u.n) AS n
                FROM stack_samples s, unnest(s.pids, s.comms, s.cpus, s.counts) AS u(pid, comm, cpu, n)
                WHERE s.host_id = :h GROUP BY 1, 2, 3"""
            raw = {tuple(r[:3]): r[3] for r in await conn.execute(text(raw_sums), {"h": host_id})}
            rolled = {
                tuple(r[:3]): r[3]
                for r in await conn.execute(
                    text(f"SELECT bucket, stack_id, idle, count FROM stack_group_samples_{grain} WHERE group_id = :g"),
                    {"g": group},
                )
            }
            assert raw and rolled == raw, grain
            raw_totals: dict[tuple, int] = {}
            for (b, _id, idle), n in raw.items():
                raw_totals[(b, group, idle)] = raw_totals.get((b, group, idle), 0) + n
            totals = {
                tuple(r[:3]): r[3]
                for r in await conn.execute(
                    text(f"SELECT bucket, group_id, idle, count FROM stack_host_totals_{grain} WHERE host_id = :h"),
                    {"h": host_id},
                )
            }
            assert totals == raw_totals, grain
    assert len({k[0] for k in rolled}) >= 3  # two late ten minutes, one or two current
