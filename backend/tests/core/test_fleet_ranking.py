# SPDX-License-Identifier: Apache-2.0
"""The fleet's hot code ranked and paged (app.storage.fleet: the rollup rows summed per host with numpy, session
24) on a real Postgres database of its own, against figures computed here from the samples the test sends:
ties in every sort (equal samples, equal hot hosts, equal names), both directions, pages, label filters and
`min_share` variants; a group host without any samples; functions whose signed rows cancel on a host (the range
read as an hour's running total less its last two minutes: a function only in those minutes is not that host's,
as the statement's `HAVING sum > 0` made it) and one with idle samples only."""

import hashlib
import math
import statistics
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.core.db import make_engine, make_sessionmaker, upgrade_database
from app.storage import fleet
from app.storage.binary_rows import binary_rows, int8_arrays
from app.storage.models import CatalogPiece, Function, Host
from app.storage.samples import TimeRange
from app.storage.series import partitions, rollups
from tests.conftest import _recreate_database
from tests.core.test_function_rollups import Fleet

T = datetime(2002, 3, 5, 10, 0, tzinfo=UTC)
RELEASE, BUILD = "6.18.0-ranking", "ef" * 20
GROUP = {"id": hashlib.md5(f"{RELEASE}\n{BUILD}".encode()).hexdigest(), "kernel_release": RELEASE}
# h6 is in the group but sends nothing; x1 is of another build and sends what h1 does.
HOSTS = {"h1": "db", "h2": "db", "h3": "db", "h4": "web", "h5": "web", "h6": "db", "x1": "db"}
# Lower-case letters only, so that Python's order of the names is any collation's; equal names on purpose.
NAMES = ["beta", "alpha", "alpha", "gamma", "delta", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
USER = 10  # user samples per host and minute: busy, but no function's


def _minute_samples(host: str, minute: int) -> list[tuple[int, int, bool]]:
    """(function index, count, idle) of one host's minute."""
    if host == "h6":
        return []
    h = "x1" if host == "x1" else host
    out = [(i, 5, False) for i in range(6)]  # six functions with equal samples on every host: ties
    if h in ("h1", "x1"):
        out += [(6, 50, False), (7, 50, False), (11, 9, True)]  # kappa: idle samples only
    if h == "h2":
        out.append((7, 50, False))
        if minute >= 58:
            out += [(9, 7, False), (10, 3, False)]  # theta, iota: only in the two minutes the range reads less
    if h in ("h3", "h4"):
        out.append((8, 50, False))  # eta: as many samples and hot hosts as zeta (h1, h2)
    if h == "h5":
        out.append((10, 1, False))
    return out


@pytest.fixture(scope="module")
def ranking_db(postgres_url):
    url = _recreate_database(postgres_url, "hotpath_fleet_ranking")
    upgrade_database(url)
    return url


async def _setup(engine) -> list[int]:
    await partitions.ensure(engine, T, timedelta(hours=1), timedelta(days=1), raw_ahead=timedelta(hours=6))
    sessionmaker = make_sessionmaker(engine)
    async with sessionmaker() as session:
        session.add(CatalogPiece(digest="e" * 64, module="vmlinux", function_count=len(NAMES), block_count=12))
        await session.flush()
        for i, name in enumerate(NAMES):
            session.add(Function(digest="e" * 64, index=i, name=name, offset=64 * i, size=64, block_count=1))
        for host, role in HOSTS.items():
            session.add(
                Host(
                    id=host,
                    hostname=f"n-{host}",
                    kernel_release=RELEASE,
                    kernel_build_id=BUILD if host != "x1" else "12" * 20,
                    status="active",
                    connected_at=T,
                    labels={"role": role},
                )
            )
        await session.commit()
        fids = [r[0] for r in await session.execute(text("SELECT id FROM functions ORDER BY index"))]
        await session.execute(
            text("UPDATE series_state SET watermark_1m = :t, watermark_1h = :t WHERE name = 'rollups'"), {"t": T}
        )
        await session.commit()
    rows = []
    for host in HOSTS:
        for minute in range(60):
            picks = _minute_samples(host, minute)
            if not picks:
                continue
            counts = [c for _, c, _ in picks]
            idle = sum(c for _, c, i in picks if i)
            rows.append(
                rollups.LateInterval(
                    host_id=host,
                    ts=T + timedelta(minutes=minute, seconds=5),
                    interval_ms=60_000,
                    totals=(sum(counts) + USER, USER, 0, 0, 0, idle, 0, 0),
                    function_ids=[fids[i] for i, _, _ in picks],
                    block_offsets=[0] * len(picks),
                    counts=counts,
                    idles=[i for _, _, i in picks],
                )
            )
    f = Fleet(engine, fids)
    await f.store(rows, late=False)
    await f.roll(T + timedelta(minutes=65))  # minutes to 11:05, hours to 11:00
    return fids


def _expected_outliers(
    per_host: dict[str, dict[int, int]], busy: dict[str, int], min_share: float
) -> dict[tuple[int, str], float]:
    """The outlier rule (app.storage.fleet, session 25) in plain Python: {(function id, host): median share}."""
    on = [h for h in busy if busy[h] > 0]
    if len(on) < fleet.OUTLIER_MIN_HOSTS:
        return {}
    out: dict[tuple[int, str], float] = {}
    for fid in {f for h in on for f in per_host[h]}:
        shares = {h: per_host[h].get(fid, 0) / busy[h] for h in on}
        median = statistics.median(shares.values())
        mad = statistics.median(abs(x - median) for x in shares.values())
        for h, x in shares.items():
            z = 0.6745 * (x - median) / mad if mad else math.inf
            if (
                per_host[h].get(fid, 0) >= fleet.OUTLIER_MIN_SAMPLES
                and x >= min_share
                and x > median
                and x >= fleet.OUTLIER_MIN_RATIO * median
                and z >= fleet.OUTLIER_MIN_Z
            ):
                out[(fid, h)] = median
    return out


def _expected(
    fids: list[int],
    minutes: int,
    hosts: list[str],
    min_share: float,
    sort: str,
    descending: bool,
    limit: int,
    offset: int,
) -> tuple[int, list[dict[str, Any]]]:
    """The answer's functions count and items from the samples sent in the range's first `minutes` minutes."""
    busy = {h: 0 for h in hosts}
    per_host: dict[str, dict[int, int]] = {h: {} for h in hosts}
    for h in hosts:
        for minute in range(minutes):
            picks = _minute_samples(h, minute)
            busy[h] += sum(c for _, c, i in picks if not i) + (USER if picks else 0)
            for i, c, idle in picks:
                if not idle:
                    per_host[h][fids[i]] = per_host[h].get(fids[i], 0) + c
    ranked: dict[int, dict[str, Any]] = {}
    for h in hosts:
        for fid, s in per_host[h].items():
            r = ranked.setdefault(fid, {"samples": 0, "hot_hosts": 0, "cells": []})
            r["samples"] += s
            r["hot_hosts"] += int(busy[h] > 0 and s >= min_share * busy[h])
            r["cells"].append((h, s))
    name = {fid: NAMES[k] for k, fid in enumerate(fids)}
    order = sorted(ranked, key=lambda f: (name[f], f))
    d = -1 if descending else 1
    if sort == "samples":
        order.sort(key=lambda f: d * ranked[f]["samples"])
    elif sort == "hosts":
        order.sort(key=lambda f: (d * ranked[f]["hot_hosts"], -ranked[f]["samples"]))
    elif descending:
        order = sorted(sorted(ranked), key=lambda f: name[f], reverse=True)
    page = order[offset : offset + limit]
    outliers = _expected_outliers(per_host, busy, min_share)
    items = []
    for fid in page:
        r = ranked[fid]
        cells = []
        for h, s in sorted(r["cells"], key=lambda c: (-c[1], c[0])):
            share = s / busy[h]
            cell = {"host_id": h, "samples": s, "share": share, "hot": share >= min_share}
            cells.append({**cell, "outlier": (fid, h) in outliers})
        items.append(
            {
                "function_id": fid,
                "name": name[fid],
                "module": "vmlinux",
                "samples": r["samples"],
                "hot_hosts": r["hot_hosts"],
                "host_share": r["hot_hosts"] / len(hosts),
                "outlier_hosts": [c["host_id"] for c in cells if c["outlier"]],
                "median_share": next((m for (f, _h), m in outliers.items() if f == fid), None),
                "cells": cells,
            }
        )
    return (len(order) if page else 0), items


async def test_hot_code_ranks_pages_and_ties_as_the_samples_sent(ranking_db):
    engine = make_engine(ranking_db)
    sessionmaker = make_sessionmaker(engine)
    try:
        fids = await _setup(engine)
        # [10:00, 10:58) is read as the hour's running total at 10:50 less the minutes 10:58 and 10:59.
        assert fleet._within_hour(T, T + timedelta(minutes=58), T + timedelta(minutes=65)) == {
            ("run", T + timedelta(minutes=50)): 1,
            ("1m", T + timedelta(minutes=58)): -1,
            ("1m", T + timedelta(minutes=59)): -1,
        }
        group = ["h1", "h2", "h3", "h4", "h5", "h6"]
        cases = 0
        for minutes in (58, 60):
            r = TimeRange(T, T + timedelta(minutes=minutes))
            for labels, hosts in (({}, group), ({"role": "db"}, ["h1", "h2", "h3", "h6"])):
                for sort in ("samples", "hosts", "name"):
                    for descending in (True, False):
                        for min_share, limit, offset in ((0.01, 50, 0), (0.2, 3, 2), (0.5, 4, 7), (1.0, 50, 30)):
                            async with sessionmaker() as session:
                                answer = await fleet.hot_code(
                                    session, GROUP, labels, r, min_share, limit, offset, sort, descending
                                )
                            want = _expected(fids, minutes, hosts, min_share, sort, descending, limit, offset)
                            case = (minutes, labels, sort, descending, min_share, limit, offset)
                            assert (answer["functions"], answer["items"]) == want, case
                            assert [h["id"] for h in answer["hosts"]] == hosts, case
                            cases += 1
        assert cases == 96
        # The cancelled entries: theta (only in 10:58-10:59, on h2) is no function of the range, iota has no cell
        # of h2; kappa (idle samples only) none at all; h6 (no samples) is a host with 0 busy samples and no cell.
        async with sessionmaker() as session:
            answer = await fleet.hot_code(
                session, GROUP, {}, TimeRange(T, T + timedelta(minutes=58)), 0.01, 50, 0, "name", False
            )
        names = [i["name"] for i in answer["items"]]
        assert "theta" not in names and "kappa" not in names and answer["functions"] == 10
        iota = next(i for i in answer["items"] if i["name"] == "iota")
        assert [c["host_id"] for c in iota["cells"]] == ["h5"]
        assert {h["id"]: h["busy_samples"] for h in answer["hosts"]}["h6"] == 0
        assert [i["name"] for i in answer["items"]][:3] == ["alpha", "alpha", "beta"]
    finally:
        await engine.dispose()


async def test_a_driver_error_of_the_binary_fetch_is_sqlalchemys(ranking_db):
    """The rows fetched with binary results (psycopg's cursor) fail as the session's own statements do, so a
    node's part of hot code that loses its connection is named by its error's class (nodes.Nodes.each)."""
    engine = make_engine(ranking_db)
    try:
        async with make_sessionmaker(engine)() as session:
            sql = "SELECT CAST(:x AS bigint) AS x, array_send(CAST(:a AS bigint[])) AS a"
            rows = await binary_rows(session, sql, {"x": 7, "a": [3, -1, 2**40]})
            assert [r.x for r in rows] == [7]
            values, lengths = int8_arrays([rows[0].a])
            assert values.tolist() == [3, -1, 2**40] and lengths.tolist() == [3]
            with pytest.raises(DBAPIError, match="no_such_table"):
                await binary_rows(session, "SELECT * FROM no_such_table WHERE x = :x", {"x": 1})
    finally:
        await engine.dispose()
