# SPDX-License-Identifier: Apache-2.0
"""The fleet: hosts grouped by kernel build (release and build id), narrowed by label, and a group's hot
code over a time range. Hosts of one build share their catalog pieces (content-addressed), so a function
has the same id on every host of the group and the rollups of all of them add up per function id.

Hot code reads only the rollups: the hosts' busy samples from `sample_totals_1h`/`_1m` and their
per-function samples from `sample_functions_1h`/`_10m`/`_1m` (migrations 0016 and 0017: one row of arrays
per host and bucket) and the running totals of the ten minutes within their hour (`sample_functions_10m_run`,
migration 0018), over the whole hours and minutes of the range below the rollup watermarks
(app.storage.samples.plan): never the raw intervals nor the per-block rollups. Each hour's minutes are
read per host as the signed rows that sum them at the least cost (`_within_hour`: e.g. an hour's first 58
minutes as its running total at its last ten minutes, once closed, less two minute rows), so a request sums
a few rows per host and hour instead of one per minute and ten minutes. The edges of the range that no rollup
covers yet are left out, and the answer says which part of the range it covers (docs/decisions.md, "The
fleet's first slice", "Fleet hot code from per-function rollups", "Fleet hot code from arrays per host
and bucket" and "Fleet hot code from running totals").

Postgres only reads those rows: their arrays come to the backend as they are stored (array_send's binary
form), and the sums per host and function, the hot test, the ranking and the page's cells are made here with
numpy (`_per_host_sums`, `_rank`, `_page`), in int64 where the statement summed float8 (the same figures below
2^53). Orders that compare names or host ids take Postgres' order of them (one query for the names of every
ranked function; the host list's order of ids), so the database's collation decides as before ("Fleet hot
code summed in the backend with numpy", session 24).

With several database nodes (app.storage.nodes) each database reads its own hosts' busy samples and rows, at
once, over its own connection (the coordinator's on the request's session, each node's on its engine), all
planned below the same watermarks, the lowest of every database's; the per-host rows add up in the backend as
one database's would (`_per_database`). The hosts, the names and the page stay on the coordinator. A node
that does not answer, or not within `nodes.READ_TIMEOUT_S`, fails the request with `nodes.NodeUnavailable`,
which names it, rather than showing the fleet without its hosts ("Fleet hot code read per node", session 25).
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.storage import nodes
from app.storage.binary_rows import I64, binary_rows, int8_arrays
from app.storage.samples import TimeRange, plan
from app.storage.series import rollups

# The hosts the fleet shows: active, and connected at least once (so their kernel is known).
ACTIVE = "h.status = 'active' AND h.connected_at IS NOT NULL"
# A group's id: a digest of its kernel release and build id (stable, URL-safe, no separator to escape).
GROUP_ID_SQL = rollups.GROUP_ID_SQL

TEN_MINUTES = timedelta(minutes=10)
HOUR = timedelta(hours=1)

_GROUP_SORTS = {
    "hosts": "host_count {dir}, kernel_release, kernel_build_id",
    "release": "kernel_release {dir}, kernel_build_id {dir}",
    "online": "online_count {dir}, host_count DESC, kernel_release",
    "offline": "host_count - online_count {dir}, host_count DESC, kernel_release",
}


def _label_filter(labels: dict[str, str]) -> tuple[str, dict[str, Any]]:
    if not labels:
        return "", {}
    return " AND h.labels @> CAST(:sel AS jsonb)", {"sel": json.dumps(labels)}


async def groups(
    session: AsyncSession, labels: dict[str, str], limit: int, offset: int, sort: str, descending: bool
) -> dict[str, Any]:
    """A page of kernel-build groups of the active hosts (that have connected at least once, so their kernel
    is known) carrying every label in `labels`, each with its
    host count, online and offline counts and its hosts (id, name, online, labels)."""
    where, params = _label_filter(labels)
    order = _GROUP_SORTS[sort].format(dir="DESC" if descending else "ASC")
    rows = (
        await session.execute(
            text(f"""
        WITH g AS (
            SELECT {GROUP_ID_SQL} AS id, h.kernel_release, h.kernel_build_id, count(*) AS host_count,
                   count(*) FILTER (WHERE h.online) AS online_count,
                   json_agg(json_build_object('id', h.id, 'hostname', h.hostname, 'online', h.online,
                                              'last_seen', h.last_seen, 'labels', h.labels)
                            ORDER BY h.hostname, h.id) AS hosts
            FROM hosts h WHERE {ACTIVE}{where}
            GROUP BY 1, 2, 3)
        SELECT g.*, count(*) OVER () AS n, sum(host_count) OVER () AS all_hosts FROM g
        ORDER BY {order} LIMIT :limit OFFSET :offset"""),
            {**params, "limit": limit, "offset": offset},
        )
    ).all()
    total = int(rows[0].n) if rows else 0
    if not rows and offset:
        total = int(
            (
                await session.execute(
                    text(f"SELECT count(DISTINCT {GROUP_ID_SQL}) FROM hosts h WHERE {ACTIVE}{where}"),
                    params,
                )
            ).scalar_one()
        )
    return {
        "total": total,
        "limit": limit,
        "offset": offset,
        "labels": labels,
        "items": [
            {
                "id": r.id,
                "kernel_release": r.kernel_release,
                "kernel_build_id": r.kernel_build_id,
                "host_count": int(r.host_count),
                "online_count": int(r.online_count),
                "offline_count": int(r.host_count - r.online_count),
                "hosts": r.hosts,
            }
            for r in rows
        ],
    }


async def group_summary(session: AsyncSession, group_id: str) -> dict[str, Any] | None:
    row = (
        await session.execute(
            text(f"""
        SELECT h.kernel_release, h.kernel_build_id FROM hosts h
        WHERE {ACTIVE} AND {GROUP_ID_SQL} = :g LIMIT 1"""),
            {"g": group_id},
        )
    ).first()
    if row is None:
        return None
    return {"id": group_id, "kernel_release": row.kernel_release, "kernel_build_id": row.kernel_build_id}


async def group_hosts(
    session: AsyncSession, group_id: str, labels: dict[str, str], without: dict[str, str] | None = None
) -> list[Any]:
    """The group's active hosts carrying every label of `labels` and none of `without` (each a key=value:
    a host with that key and another value, or without the key, is kept), by name: id, hostname, online,
    labels."""
    where, params = _label_filter(labels)
    for i, (key, value) in enumerate(sorted((without or {}).items())):
        where += f" AND NOT (h.labels @> CAST(:without{i} AS jsonb))"
        params[f"without{i}"] = json.dumps({key: value})
    return list(
        (
            await session.execute(
                text(f"""
        SELECT h.id, h.hostname, h.online, h.labels FROM hosts h
        WHERE {ACTIVE} AND {GROUP_ID_SQL} = :g{where} ORDER BY h.hostname, h.id"""),
                {**params, "g": group_id},
            )
        ).all()
    )


def _rollup_spans(spans: list[tuple[str, datetime, datetime]]) -> list[tuple[str, datetime, datetime]]:
    return [s for s in spans if s[0] != "raw"]


def _floor_ten(t: datetime) -> datetime:
    t = t.astimezone(UTC)
    return t.replace(minute=t.minute // 10 * 10, second=0, microsecond=0)


def function_spans(spans: list[tuple[str, datetime, datetime]]) -> list[tuple[str, datetime, datetime]]:
    """The rollup spans of a range by the grain of their buckets, as hot code reports them (`rollups`): each
    minute span's whole ten minutes (UTC-aligned), its other minutes, whole hours (`_function_parts` reads
    the minutes of an hour possibly otherwise: the same sums). A minute span lies below the minute watermark,
    so every ten minutes inside it is complete."""
    out: list[tuple[str, datetime, datetime]] = []
    for grain, lo, hi in _rollup_spans(spans):
        if grain != "1m":
            out.append((grain, lo, hi))
            continue
        t0 = _floor_ten(lo)
        t0 = t0 if t0 == lo else t0 + TEN_MINUTES
        t1 = _floor_ten(hi)
        if t0 >= t1:
            out.append(("1m", lo, hi))
            continue
        out.extend(s for s in (("1m", lo, t0), ("10m", t0, t1), ("1m", t1, hi)) if s[1] < s[2])
    return out


def _union(
    table: str,
    cols: str,
    spans: list[tuple[str, datetime, datetime]],
    prefix: str,
    hosts: str = "host_id IN (SELECT id FROM grp)",
) -> tuple[str, dict[str, Any]]:
    parts: list[str] = []
    params: dict[str, Any] = {}
    for i, (grain, lo, hi) in enumerate(spans):
        a, b = f"{prefix}lo{i}", f"{prefix}hi{i}"
        params[a], params[b] = lo, hi
        parts.append(f"SELECT {cols} FROM {table}_{grain} WHERE {hosts} AND bucket >= :{a} AND bucket < :{b}")
    return " UNION ALL ".join(parts), params


# What a per-function row costs the reader, in minute rows: a ten-minute or running row holds a few minutes'
# functions (~3.5x a minute's in bench/fleet's hour). Only used to choose between readings of one stretch.
_ROW_COST = {"1m": 1, "10m": 4, "run": 4}
Part = tuple[str, datetime]  # a row key of one host: grain ("1m", "10m", "run") and bucket


def _minutes(lo: datetime, hi: datetime) -> list[Part]:
    return [("1m", lo + timedelta(minutes=k)) for k in range(int((hi - lo) // timedelta(minutes=1)))]


def _up_to(x: datetime, hour: datetime, wm_1m: datetime) -> list[dict[Part, int]]:
    """Ways to read one host's sums of [hour, x) (x a minute of the hour, at most the minute watermark), as
    signed rows: the hour's running total at the ten minutes before x's, then x's minutes of its ten minutes;
    or, once x's ten minutes are closed, the running total at them less their minutes from x. Only rows that
    no longer change as the rollup task advances are read (closed ten minutes, minutes below the watermark
    the statement was planned with): the task may commit between this request's statements, and a ten
    minutes still open at the watermark read would have gained the minutes it summed since."""
    if x == hour:
        return [{}]
    closed = _floor_ten(wm_1m)
    if x == hour + HOUR:
        return [{("run", hour + HOUR - TEN_MINUTES): 1}]
    s = _floor_ten(x)
    base: dict[Part, int] = {("run", s - TEN_MINUTES): 1} if s > hour else {}
    ways = [{**base, **dict.fromkeys(_minutes(s, x), 1)}]
    if s < closed:
        ways.append({("run", s): 1, **dict.fromkeys(_minutes(x, s + TEN_MINUTES), -1)})
    return ways


def _net(*signed: tuple[dict[Part, int], int]) -> dict[Part, int]:
    out: dict[Part, int] = {}
    for rows, sign in signed:
        for key, n in rows.items():
            out[key] = out.get(key, 0) + sign * n
    return {k: n for k, n in out.items() if n}


def _cost(rows: dict[Part, int]) -> int:
    return sum(_ROW_COST[g] for g, _b in rows)


def _within_hour(lo: datetime, hi: datetime, wm_1m: datetime) -> dict[Part, int]:
    """The cheapest reading of one host's sums of [lo, hi), minutes of one hour below the minute watermark:
    its minutes and whole ten minutes as stored, the whole ten minutes as the difference of the hour's running
    totals, or the running sums up to hi less those up to lo (each read as `_up_to` offers)."""
    hour = lo.replace(minute=0)
    t0 = _floor_ten(lo)
    t0 = t0 if t0 == lo else t0 + TEN_MINUTES
    t1 = _floor_ten(hi)
    ways: list[dict[Part, int]] = []
    if t0 < t1:
        edges = {**dict.fromkeys(_minutes(lo, t0), 1), **dict.fromkeys(_minutes(t1, hi), 1)}
        tens = int((t1 - t0) // TEN_MINUTES)
        ways.append({**edges, **{("10m", t0 + k * TEN_MINUTES): 1 for k in range(tens)}})
        ways.append(_net((edges, 1), ({("run", t1 - TEN_MINUTES): 1}, 1), (_up_to(t0, hour, wm_1m)[0], -1)))
    else:
        ways.append(dict.fromkeys(_minutes(lo, hi), 1))
    for upper in _up_to(hi, hour, wm_1m):
        for lower in _up_to(lo, hour, wm_1m):
            ways.append(_net((upper, 1), (lower, -1)))
    return min(ways, key=_cost)


def _function_parts(spans: list[tuple[str, datetime, datetime]], wm_1m: datetime) -> tuple[str, dict[str, Any]]:
    """One host's per-function rows of the rollup spans (`plan`'s), for the hot-code statement's per-host
    LATERAL (`g.host_id`): rows of function ids, busy samples and a sign. Whole hours are their hour rows; the
    minutes of a span are read per hour, the cheapest way `_within_hour` finds, from the minute rows, the
    ten-minute rows and the hour's running totals
    (`sample_functions_10m_run`, migration 0018; every running row read is of closed ten minutes, so complete,
    and a missing one is a sum of nothing): all of them sums of the same minutes, so the answer is the same."""
    rows: dict[Part, int] = {}
    hours: list[tuple[datetime, datetime]] = []
    wm_1m = wm_1m.astimezone(UTC)
    for grain, lo, hi in ((g, a.astimezone(UTC), b.astimezone(UTC)) for g, a, b in spans):
        if grain == "1h":
            hours.append((lo, hi))
            continue
        t = lo
        while t < hi:
            end = min(hi, t.replace(minute=0) + HOUR)
            for part, n in _within_hour(t, end, wm_1m).items():
                rows[part] = rows.get(part, 0) + n
            t = end
    parts: list[str] = []
    params: dict[str, Any] = {}
    for k, (lo, hi) in enumerate(hours):
        params[f"hlo{k}"], params[f"hhi{k}"] = lo, hi
        parts.append(
            "SELECT function_ids, busy_counts, 1 AS sign FROM sample_functions_1h "
            f"WHERE host_id = g.host_id AND bucket >= :hlo{k} AND bucket < :hhi{k}"
        )
    for grain in ("1m", "10m", "run"):
        for sign in sorted({n for (g, _b), n in rows.items() if g == grain}, reverse=True):
            key = f"b{grain}{'p' if sign > 0 else 'n'}{abs(sign)}"
            params[key] = sorted(b for (g, b), n in rows.items() if g == grain and n == sign)
            table = rollups.RUNNING if grain == "run" else f"sample_functions_{grain}"
            parts.append(
                f"SELECT function_ids, busy_counts, {sign} AS sign FROM {table} "
                f"WHERE host_id = g.host_id AND bucket = ANY(CAST(:{key} AS timestamptz[]))"
            )
    return " UNION ALL ".join(parts), params


@dataclass
class _Sums:
    """Every group host's samples of each function with any in the range, ordered by host, then function:
    `host` indexes the group's hosts (their order in the answer), `function` indexes `ids`."""

    host: I64
    function: I64
    samples: I64
    ids: I64  # the distinct function ids, ascending


def _per_host_sums(rows: Sequence[Any]) -> _Sums:
    """Sum the signed rows (host index, sign, ids and busy counts as array_send bytes) per host and function,
    in int64 (exact); like the statement's `HAVING sum > 0`, a function whose signed rows sum to 0 or less on a
    host is not one of that host's."""
    ids, lengths = int8_arrays([r.ids for r in rows])
    counts, count_lengths = int8_arrays([r.counts for r in rows])
    if not np.array_equal(lengths, count_lengths):
        raise ValueError("a rollup row's function ids and counts differ in length")
    host = np.repeat(np.fromiter((r.host for r in rows), dtype=np.int64, count=len(rows)), lengths)
    signed = counts * np.repeat(np.fromiter((r.sign for r in rows), dtype=np.int64, count=len(rows)), lengths)
    if not len(ids):
        empty = np.zeros(0, dtype=np.int64)
        return _Sums(empty, empty, empty, empty)
    # One key per (host, function id), ordered as the rows came (host by host, each row's ids ascending): a
    # stable sort (timsort) of those sorted runs is cheap.
    lowest = int(ids.min())
    width = int(ids.max()) - lowest + 1
    key = host * width + (ids - lowest)
    order = np.argsort(key, kind="stable")
    key = key[order]
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    samples = np.add.reduceat(signed[order], starts)
    key = key[starts]
    kept = samples > 0
    key, samples = key[kept], samples[kept]
    distinct, function = np.unique(key % width, return_inverse=True)
    return _Sums(key // width, function.reshape(-1).astype(np.int64), samples, distinct + lowest)


@dataclass
class _Ranked:
    """Per function of `_Sums.ids` with samples on any host: its samples over the group and its hot hosts."""

    function: I64  # indexes into _Sums.ids
    samples: I64
    hot_hosts: I64


def _rank(sums: _Sums, busy: I64, min_share: float) -> _Ranked:
    """Each function's samples over the group's hosts and its hot hosts: those where its samples are at least
    `min_share` of the host's busy samples, compared in float8 as the statement did (`s >= min_share * busy`,
    the product rounded once; samples and busy counts are exact below 2^53)."""
    width = len(sums.ids)
    host_busy = busy[sums.host]
    hot = (host_busy > 0) & (sums.samples.astype(np.float64) >= min_share * host_busy.astype(np.float64))
    functions = np.flatnonzero(np.bincount(sums.function, minlength=width))
    samples = np.zeros(width, dtype=np.int64)
    np.add.at(samples, sums.function, sums.samples)
    hot_hosts = np.bincount(sums.function[hot], minlength=width)
    return _Ranked(functions, samples[functions], hot_hosts[functions].astype(np.int64))


# Outlier hosts (docs/decisions.md, "Outlier hosts in the fleet's hot code", session 25): a host where a
# function takes a far larger share of its busy samples than on the group's typical host. The typical host is
# the median of the function's shares over the group's hosts with busy samples (zero where it has none), its
# spread their median absolute deviation (MAD). A host is an outlier for the function when all hold:
OUTLIER_MIN_HOSTS = 5  # the group has at least this many hosts with busy samples (a median of fewer says little)
OUTLIER_MIN_SAMPLES = 50  # the host has at least this many samples of it (a tiny host's few are noise)
OUTLIER_MIN_RATIO = 3.0  # its share is at least this many times the median share
OUTLIER_MIN_Z = 3.5  # its modified z-score, 0.6745 (share - median) / MAD, at least this (any, when MAD is 0)
# and its share is at least min_share (it is hot there). The group's list is capped, farthest out first.
OUTLIER_LIST_CAP = 50


def outlier_rule(min_share: float) -> dict[str, Any]:
    """The rule's thresholds, as the answer states them (the console says why a host is listed)."""
    return {
        "min_hosts": OUTLIER_MIN_HOSTS,
        "min_samples": OUTLIER_MIN_SAMPLES,
        "min_ratio": OUTLIER_MIN_RATIO,
        "min_z": OUTLIER_MIN_Z,
        "min_share": min_share,
        "list_cap": OUTLIER_LIST_CAP,
        "text": (
            f"a host whose share of the function is at least {OUTLIER_MIN_RATIO:g}x the median share over the "
            f"group's hosts with busy samples, with a modified z-score (0.6745 x (share - median) / MAD) of at "
            f"least {OUTLIER_MIN_Z:g}, at least {OUTLIER_MIN_SAMPLES} samples of it and a share of at least "
            f"min_share; only in a group of at least {OUTLIER_MIN_HOSTS} hosts with busy samples"
        ),
    }


@dataclass
class _Outliers:
    """Every (function, host) pair the rule picks, farthest out first (share above the median, descending):
    `function` indexes `_Sums.ids`, `host` the group's hosts; the median share and MAD of the function
    beside each, and each pair's modified z-score (inf when the MAD is 0)."""

    function: I64
    host: I64
    samples: I64
    share: npt.NDArray[np.float64]
    median: npt.NDArray[np.float64]
    z: npt.NDArray[np.float64]


def _outliers(sums: _Sums, busy: I64, min_share: float) -> _Outliers:
    """The outlier pairs of the whole ranked set (every function with samples, not only a page). Only the
    functions with a candidate host (enough samples, hot there) are looked at, and of those only the ones
    with samples on at least half the busy hosts need a median computed: with fewer, more than half the
    shares are 0, so the median and the MAD are both 0 (every candidate is then far out)."""
    empty_i = np.zeros(0, dtype=np.int64)
    empty_f = np.zeros(0, dtype=np.float64)
    none = _Outliers(empty_i, empty_i, empty_i, empty_f, empty_f, empty_f)
    busy_hosts = np.flatnonzero(busy > 0)
    n = len(busy_hosts)
    if n < OUTLIER_MIN_HOSTS or not len(sums.samples):
        return none
    host_busy = busy[sums.host]
    on_busy = host_busy > 0
    share = np.zeros(len(sums.samples), dtype=np.float64)
    np.divide(sums.samples, host_busy, out=share, where=on_busy)
    candidate = on_busy & (sums.samples >= OUTLIER_MIN_SAMPLES) & (share >= min_share)
    if not candidate.any():
        return none
    width = len(sums.ids)
    with_candidate = np.zeros(width, dtype=bool)
    with_candidate[sums.function[candidate]] = True
    present = np.bincount(sums.function[on_busy], minlength=width)
    median = np.zeros(width, dtype=np.float64)
    mad = np.zeros(width, dtype=np.float64)
    dense = np.flatnonzero(with_candidate & (2 * present >= n))
    if len(dense):
        # The shares of those functions on every busy host (0 where none), one row per function.
        row = np.full(width, -1, dtype=np.int64)
        row[dense] = np.arange(len(dense))
        column = np.full(len(busy), -1, dtype=np.int64)
        column[busy_hosts] = np.arange(n)
        pick = on_busy & (row[sums.function] >= 0)
        matrix = np.zeros((len(dense), n), dtype=np.float64)
        matrix[row[sums.function[pick]], column[sums.host[pick]]] = share[pick]
        med = np.median(matrix, axis=1)
        median[dense] = med
        mad[dense] = np.median(np.abs(matrix - med[:, None]), axis=1)
    at = np.flatnonzero(candidate)
    f = sums.function[at]
    above = share[at] - median[f]
    z = np.full(len(at), np.inf)
    spread = mad[f] > 0
    z[spread] = 0.6745 * above[spread] / mad[f][spread]
    keep = (above > 0) & (share[at] >= OUTLIER_MIN_RATIO * median[f]) & (z >= OUTLIER_MIN_Z)
    at, f, z = at[keep], f[keep], z[keep]
    order = np.lexsort((sums.host[at], f, -(share[at] - median[f])))
    at, f, z = at[order], f[order], z[order]
    return _Outliers(f, sums.host[at], sums.samples[at], share[at], median[f], z)


async def _named(session: AsyncSession, ids: list[int]) -> dict[int, Any]:
    """Functions' names and modules, by id (ids without a `functions` row are left out)."""
    rows = await session.execute(
        text("""
        SELECT f.id, f.name, coalesce(cp.module, '') AS module
        FROM functions f LEFT JOIN catalog_pieces cp ON cp.digest = f.digest
        WHERE f.id = ANY(CAST(:ids AS bigint[]))"""),
        {"ids": ids},
    )
    return {row.id: row for row in rows}


async def _outlier_list(
    session: AsyncSession, found: _Outliers, ids: I64, host_rows: Sequence[Any]
) -> list[dict[str, Any]]:
    """The group's outlier list: the first OUTLIER_LIST_CAP pairs, with their functions' names."""
    k = min(len(found.function), OUTLIER_LIST_CAP)
    if not k:
        return []
    fids = ids[found.function[:k]]
    named = await _named(session, sorted(set(fids.tolist())))
    out: list[dict[str, Any]] = []
    for fid, h, s, sh, med, z in zip(
        fids.tolist(),
        found.host[:k].tolist(),
        found.samples[:k].tolist(),
        found.share[:k].tolist(),
        found.median[:k].tolist(),
        found.z[:k].tolist(),
        strict=True,
    ):
        row = named.get(fid)
        if row is None:  # an id of no function, left out as the ranking leaves it out
            continue
        out.append(
            {
                "function_id": fid,
                "name": row.name,
                "module": row.module,
                "host_id": host_rows[h].id,
                "hostname": host_rows[h].hostname,
                "samples": s,
                "share": sh,
                "median_share": med,
                "ratio": sh / med if med > 0 else None,
                "z": z if np.isfinite(z) else None,
            }
        )
    return out


async def _page(
    session: AsyncSession,
    sums: _Sums,
    ranked: _Ranked,
    found: _Outliers,
    host_rows: Sequence[Any],
    busy: dict[str, int],
    min_share: float,
    limit: int,
    offset: int,
    sort: str,
    descending: bool,
) -> tuple[int, list[dict[str, Any]]]:
    """The page of the ranked functions in the order asked (samples: samples, then name and id; hosts: hot
    hosts, then samples descending, name and id; name: name, then id ascending in either direction), names
    compared by Postgres (the database's collation: one query for every ranked function's name), and each
    page function's cells: the hosts where it has samples, by samples descending, then host id (Postgres'
    order of the ids). The number of ranked functions is 0 when the page is empty, as the statement gave.
    Each page function says its outlier hosts (`found`: the rule's pairs), each cell whether it is one."""
    if not len(ranked.function):
        return 0, []
    ids = sums.ids[ranked.function]
    # Postgres' order of every ranked function's name (its collation), as two arrays in one row: the ids in
    # (name, id) order, and beside each the rank of its name (equal names, equal ranks). Ids of no function
    # (none, while a catalog piece's functions stay with its rollups) are left out, as the statement's join did.
    ordered = (
        await binary_rows(
            session,
            """
        SELECT array_send(coalesce(array_agg(x.id ORDER BY x.name, x.id), '{}')) AS ids,
               array_send(coalesce(array_agg(x.r ORDER BY x.name, x.id), '{}')) AS ranks
        FROM (SELECT f.id, f.name, dense_rank() OVER (ORDER BY f.name) AS r
              FROM functions f WHERE f.id = ANY(CAST(:ids AS bigint[]))) x""",
            {"ids": "{" + ",".join(map(str, ids.tolist())) + "}"},
        )
    )[0]
    by_name_ids, _ = int8_arrays([ordered.ids])
    name_ranks, _ = int8_arrays([ordered.ranks])
    sorter = np.argsort(by_name_ids)
    at_sorted = np.minimum(np.searchsorted(by_name_ids, ids, sorter=sorter), max(len(sorter) - 1, 0))
    known = by_name_ids[sorter[at_sorted]] == ids if len(sorter) else np.zeros(len(ids), dtype=bool)
    ids, function = ids[known], ranked.function[known]
    samples, hot_hosts = ranked.samples[known], ranked.hot_hosts[known]
    by_name = sorter[at_sorted[known]]  # each function's place in (name, id) order
    sign = -1 if descending else 1
    if sort == "samples":
        order = np.lexsort((by_name, sign * samples))
    elif sort == "hosts":
        order = np.lexsort((by_name, -samples, sign * hot_hosts))
    elif descending:
        order = np.lexsort((ids, -name_ranks[by_name]))
    else:
        order = np.argsort(by_name)
    page = order[offset : offset + limit]
    if not len(page):
        return 0, []
    named = await _named(session, ids[page].tolist())
    # The page's cells: its functions' entries, grouped by page position, by samples descending, then host id.
    at = np.full(len(sums.ids), -1, dtype=np.int64)
    at[function[page]] = np.arange(len(page))
    chosen = np.flatnonzero(at[sums.function] >= 0)
    id_order = np.fromiter((int(h.id_order) for h in host_rows), dtype=np.int64, count=len(host_rows))
    cell_host, cell_samples = sums.host[chosen], sums.samples[chosen]
    cell_at = at[sums.function[chosen]]
    cell_order = np.lexsort((id_order[cell_host], -cell_samples, cell_at))
    bounds = np.searchsorted(cell_at[cell_order], np.arange(len(page) + 1))
    host_ids = [h.id for h in host_rows]
    # Shares as Python computed them (int / int: both below 2^53, so the quotient of two exact doubles, rounded
    # once), 0 for a host without busy samples.
    cell_busy = np.array([busy[h] for h in host_ids], dtype=np.int64)[cell_host]
    share = np.zeros(len(cell_host), dtype=np.float64)
    np.divide(cell_samples, cell_busy, out=share, where=cell_busy > 0)
    hot = (cell_busy > 0) & (share >= min_share)
    # The outlier pairs of the page's functions (by index into _Sums.ids), each function's median share.
    page_functions = set(function[page].tolist())
    outlier_pairs: set[tuple[int, int]] = set()
    medians: dict[int, float] = {}
    for fi, h, med in zip(found.function.tolist(), found.host.tolist(), found.median.tolist(), strict=True):
        if fi in page_functions:
            outlier_pairs.add((fi, h))
            medians[fi] = med
    items: list[dict[str, Any]] = []
    for k, f in enumerate(page.tolist()):
        span = cell_order[bounds[k] : bounds[k + 1]]
        fi = int(function[f])
        cells = [
            {"host_id": host_ids[h], "samples": s, "share": sh, "hot": ho, "outlier": (fi, h) in outlier_pairs}
            for h, s, sh, ho in zip(
                cell_host[span].tolist(),
                cell_samples[span].tolist(),
                share[span].tolist(),
                hot[span].tolist(),
                strict=True,
            )
        ]
        row = named[int(ids[f])]
        items.append(
            {
                "function_id": row.id,
                "name": row.name,
                "module": row.module,
                "samples": int(samples[f]),
                "hot_hosts": int(hot_hosts[f]),
                "host_share": int(hot_hosts[f]) / len(host_rows),
                "outlier_hosts": [c["host_id"] for c in cells if c["outlier"]],
                "median_share": medians.get(fi),
                "cells": cells,
            }
        )
    return len(ids), items


def _rows_sql(functions: str) -> str:
    """The hot-code statement: `_function_parts`' signed rows of each host of :bh, with the host's index in
    the group's host list (:bi, beside it), its sign and its two arrays as array_send bytes."""
    return f"""
        SELECT g.i AS host, b.sign, array_send(b.function_ids) AS ids, array_send(b.busy_counts) AS counts
        FROM unnest(CAST(:bh AS text[]), CAST(:bi AS int8[])) AS g(host_id, i), LATERAL ({functions}) b"""


async def _lowest_watermarks(session: AsyncSession, spread: nodes.Nodes) -> tuple[datetime, datetime]:
    """Each rollup watermark the lowest of every database's, as `hotpath_nodes.series_state` gives it, but
    read from each database directly (a node that does not answer is named within the nodes' read bound):
    every database's part of the read is planned with the same watermarks, below which each has its rollups
    complete."""

    async def on_node(node: nodes.Node) -> tuple[datetime, datetime]:
        async with node.engine.connect() as conn:
            return await rollups.watermarks(conn)

    mine, theirs = await spread.beside(rollups.watermarks(await session.connection()), on_node, spread.nodes)
    marks = [mine, *theirs]
    return min(m[0] for m in marks), min(m[1] for m in marks)


async def _per_database(
    session: AsyncSession,
    spread: nodes.Nodes,
    hosts: list[str],
    spans: list[tuple[str, datetime, datetime]],
    functions: str,
    fp: dict[str, Any],
) -> tuple[dict[str, int], list[Any]]:
    """With database nodes: each database's part of the read, at once, over its own connection: its hosts'
    busy samples and `_rows_sql`'s rows of them (the coordinator's on the session, its local tables; each
    node's on the node's own engine), instead of each node host's rows through the coordinator's foreign
    partition one host and statement part at a time (docs/decisions.md, "Fleet hot code read per node").
    A host's rows are on one database only, so the parts' rows, each with its host's index in `hosts`, add
    up as one statement's would. Returns the busy samples in the order of `hosts` and the rows."""
    placed = await spread.place(hosts)
    at: dict[int, list[int]] = {}
    for i, h in enumerate(hosts):
        at.setdefault(placed[h], []).append(i)
    totals, tp = _union(
        "sample_totals", "host_id, total_samples - idle_samples AS c", spans, "t", "host_id = ANY(CAST(:bh AS text[]))"
    )
    busy_sql = text(f"SELECT host_id, sum(c) AS busy FROM ({totals}) t GROUP BY host_id")
    rows_sql = _rows_sql(functions)

    async def read(conn: AsyncSession | AsyncConnection, index: int) -> tuple[list[Any], list[Any]]:
        ids = [hosts[i] for i in at.get(index, [])]
        if not ids:
            return [], []
        sums = (await conn.execute(busy_sql, {**tp, "bh": ids})).all()
        return list(sums), await binary_rows(conn, rows_sql, {**fp, "bh": ids, "bi": at[index]})

    async def on_node(node: nodes.Node) -> tuple[list[Any], list[Any]]:
        async with node.engine.connect() as conn:
            return await read(conn, node.index)

    mine, theirs = await spread.beside(read(session, 0), on_node, [n for n in spread.nodes if n.index in at])
    busy = dict.fromkeys(hosts, 0)
    rows: list[Any] = []
    for sums, part in (mine, *theirs):
        busy.update((r.host_id, int(r.busy)) for r in sums)
        rows.extend(part)
    return busy, rows


async def hot_code(
    session: AsyncSession,
    group: dict[str, Any],
    labels: dict[str, str],
    r: TimeRange,
    min_share: float,
    limit: int,
    offset: int,
    sort: str,
    descending: bool,
) -> dict[str, Any]:
    """The group's hottest functions in the range (samples of the idle task left out), each with its
    samples on every host of the group that has any and the share of the group's hosts where it is hot:
    where its samples are at least `min_share` of that host's busy (non-idle) samples in the range. With
    database nodes each database reads its own hosts' rows (`_per_database`); NodeUnavailable names the
    nodes that do not answer."""
    spread = nodes.active()
    if spread is None:
        wm_1m, wm_1h = await rollups.watermarks(await session.connection())
    else:
        wm_1m, wm_1h = await _lowest_watermarks(session, spread)
    spans = _rollup_spans(plan(r.start, r.end, wm_1m, wm_1h))
    fspans = function_spans(spans)
    where, params = _label_filter(labels)
    grp = f"SELECT h.id FROM hosts h WHERE {ACTIVE} AND {GROUP_ID_SQL} = :g{where}"
    params = {**params, "g": group["id"]}
    covered = (min(s[1] for s in spans), max(s[2] for s in spans)) if spans else None
    items: list[dict[str, Any]] = []
    outliers: list[dict[str, Any]] = []
    outliers_total = 0
    n = 0
    # The group's hosts with their busy samples in the range (0 without rollup rows; with nodes, each
    # database's hosts' busy samples come with their rows below).
    if spans and spread is None:
        totals, tp = _union("sample_totals", "host_id, total_samples - idle_samples AS c", spans, "t")
        busy_sql = f"SELECT host_id, sum(c) AS busy FROM ({totals}) t GROUP BY host_id"
    else:
        busy_sql, tp = "SELECT NULL::text AS host_id, 0::numeric AS busy WHERE false", {}
    host_rows = (
        await session.execute(
            text(f"""
        WITH grp AS MATERIALIZED ({grp}), busy AS ({busy_sql})
        SELECT h.id, h.hostname, h.online, h.labels, coalesce(bz.busy, 0) AS busy,
               row_number() OVER (ORDER BY h.id) AS id_order
        FROM hosts h JOIN grp ON grp.id = h.id LEFT JOIN busy bz ON bz.host_id = h.id
        ORDER BY h.hostname, h.id"""),
            {**params, **tp},
        )
    ).all()
    busy = {h.id: int(h.busy) for h in host_rows}
    if spans and host_rows:
        # The rows Postgres used to sum (per host, `_function_parts`' signed rows of the range), fetched as they
        # are stored: each array in Postgres' binary form (array_send), parsed and summed here with numpy.
        functions, fp = _function_parts(spans, wm_1m)
        if spread is None:
            rows = await binary_rows(
                session, _rows_sql(functions), {**fp, "bh": list(busy), "bi": list(range(len(busy)))}
            )
        else:
            busy, rows = await _per_database(session, spread, list(busy), spans, functions, fp)
        sums = _per_host_sums(rows)
        busy_array = np.array(list(busy.values()), dtype=np.int64)
        ranked = _rank(sums, busy_array, min_share)
        found = _outliers(sums, busy_array, min_share)
        n, items = await _page(
            session, sums, ranked, found, host_rows, busy, min_share, limit, offset, sort, descending
        )
        outliers_total = len(found.function)
        outliers = await _outlier_list(session, found, sums.ids, host_rows)
    return {
        **r.public(),
        "covered_from": covered[0] if covered else None,
        "covered_to": covered[1] if covered else None,
        "rollups": [{"grain": g, "from": lo, "to": hi} for g, lo, hi in fspans],
        "group": group,
        "labels": labels,
        "min_share": min_share,
        "hosts": [
            {
                "id": h.id,
                "hostname": h.hostname,
                "online": h.online,
                "labels": h.labels,
                "busy_samples": busy.get(h.id, 0),
            }
            for h in host_rows
        ],
        "functions": n,
        "limit": limit,
        "offset": offset,
        "items": items,
        "outlier_rule": outlier_rule(min_share),
        "outliers": outliers,
        "outliers_total": outliers_total,
    }
