# SPDX-License-Identifier: Apache-2.0
"""1-minute and 1-hour rollups of the series, maintained incrementally (call stacks: 1 and 10 minutes;
per-function sums of the sampled blocks: 1 minute, 10 minutes and 1 hour, and the ten minutes' running totals
within their hour).

`series_state` holds two watermarks: every raw row before `watermark_1m` is summed into the minute
rollups, every minute rollup before `watermark_1h` into the hour rollups. The rollup task advances them
over completed buckets (a short lag behind the clock lets the interval in flight arrive), one set-based
statement per table. Data that arrives late (an agent resending after a reconnect) lands below a
watermark: the ingest writer then adds that transaction's own rows to the rollups in the same transaction
(sample intervals summed from the rows it has just written, `add_late_samples`; measurement points found
by their `batch` token, measurement and time). The writer reads the watermarks FOR SHARE and the task
updates them FOR UPDATE, so a row is summed exactly once, by one or the other, and a reader sees rollups
equal to the raw sums at every commit.
"""

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.storage.series.layout import COVERAGE_RESOURCE, FUNCTION_GRAINS, NSLOTS, SLOTS, TOTALS

log = logging.getLogger("hotpath.series")
LOCK_KEY = 0x68707072  # "hppr": one rollup task at a time across replicas
MAX_STEP = timedelta(hours=6)  # raw time summed per statement, so one pass stays bounded
TEN_MINUTES = timedelta(minutes=10)

_TOTALS = TOTALS


def _nullable_add(col: str, table: str) -> str:
    return (
        f"{col} = CASE WHEN {table}.{col} IS NULL THEN excluded.{col} WHEN excluded.{col} IS NULL "
        f"THEN {table}.{col} ELSE {table}.{col} + excluded.{col} END"
    )


def _blocks_from_raw(grain: str, where: str) -> str:
    trunc = "minute" if grain == "1m" else "hour"
    return f"""
        INSERT INTO sample_blocks_{grain} (host_id, bucket, function_id, block_offset, count, idle_count)
        SELECT s.host_id, date_trunc('{trunc}', s.ts), u.f, u.o, sum(u.c), coalesce(sum(u.c) FILTER (WHERE u.i), 0)
        FROM sample_intervals s, unnest(s.function_ids, s.block_offsets, s.counts, s.idles) AS u(f, o, c, i)
        WHERE {where} GROUP BY 1, 2, 3, 4
        ON CONFLICT (host_id, bucket, function_id, block_offset)
        DO UPDATE SET count = sample_blocks_{grain}.count + excluded.count,
                      idle_count = sample_blocks_{grain}.idle_count + excluded.idle_count"""


def _totals_from_raw(grain: str, where: str) -> str:
    trunc = "minute" if grain == "1m" else "hour"
    cols = ", ".join(_TOTALS)
    sums = ", ".join(f"sum(s.{c})" for c in _TOTALS)
    upd = ", ".join(f"{c} = sample_totals_{grain}.{c} + excluded.{c}" for c in ("covered_ms", *_TOTALS))
    return f"""
        INSERT INTO sample_totals_{grain} (host_id, bucket, covered_ms, {cols})
        SELECT s.host_id, date_trunc('{trunc}', s.ts), sum(s.interval_ms), {sums}
        FROM sample_intervals s WHERE {where} GROUP BY 1, 2
        ON CONFLICT (host_id, bucket) DO UPDATE SET {upd}"""


def _points_from_raw(grain: str, where: str) -> str:
    trunc = "minute" if grain == "1m" else "hour"
    cols = ", ".join(SLOTS)
    vals = ", ".join(f"sum(p.vals[(r.i - 1) * {NSLOTS} + {k + 1}])" for k in range(NSLOTS))
    cover = ", ".join(["count(*)::float8"] + ["NULL::float8"] * (NSLOTS - 1))
    upd = ", ".join(
        [f"seconds = measurement_points_{grain}.seconds + excluded.seconds"]
        + [_nullable_add(c, f"measurement_points_{grain}") for c in SLOTS]
    )
    return f"""
        INSERT INTO measurement_points_{grain} (host_id, measurement_id, bucket, resource, seconds, {cols})
        SELECT p.host_id, p.measurement_id, date_trunc('{trunc}', p.ts), r.res, sum(p.seconds), {vals}
        FROM measurement_points p, unnest(p.resources) WITH ORDINALITY AS r(res, i)
        WHERE {where} GROUP BY 1, 2, 3, 4
        UNION ALL
        SELECT p.host_id, p.measurement_id, date_trunc('{trunc}', p.ts), {COVERAGE_RESOURCE}, sum(p.seconds), {cover}
        FROM measurement_points p WHERE {where} GROUP BY 1, 2, 3
        ON CONFLICT (measurement_id, bucket, resource) DO UPDATE SET {upd}"""


def _hour_from_minutes() -> list[str]:
    blocks = """
        INSERT INTO sample_blocks_1h (host_id, bucket, function_id, block_offset, count, idle_count)
        SELECT host_id, date_trunc('hour', bucket), function_id, block_offset, sum(count), sum(idle_count)
        FROM sample_blocks_1m WHERE bucket >= :lo AND bucket < :hi GROUP BY 1, 2, 3, 4
        ON CONFLICT (host_id, bucket, function_id, block_offset)
        DO UPDATE SET count = sample_blocks_1h.count + excluded.count,
                      idle_count = sample_blocks_1h.idle_count + excluded.idle_count"""
    cols = ", ".join(("covered_ms", *_TOTALS))
    sums = ", ".join(f"sum({c})" for c in ("covered_ms", *_TOTALS))
    upd = ", ".join(f"{c} = sample_totals_1h.{c} + excluded.{c}" for c in ("covered_ms", *_TOTALS))
    totals = f"""
        INSERT INTO sample_totals_1h (host_id, bucket, {cols})
        SELECT host_id, date_trunc('hour', bucket), {sums}
        FROM sample_totals_1m WHERE bucket >= :lo AND bucket < :hi GROUP BY 1, 2
        ON CONFLICT (host_id, bucket) DO UPDATE SET {upd}"""
    pcols = ", ".join(("seconds", *SLOTS))
    psums = ", ".join(f"sum({c})" for c in ("seconds", *SLOTS))
    pupd = ", ".join(
        ["seconds = measurement_points_1h.seconds + excluded.seconds"]
        + [_nullable_add(c, "measurement_points_1h") for c in SLOTS]
    )
    points = f"""
        INSERT INTO measurement_points_1h (host_id, measurement_id, bucket, resource, {pcols})
        SELECT host_id, measurement_id, date_trunc('hour', bucket), resource, {psums}
        FROM measurement_points_1m WHERE bucket >= :lo AND bucket < :hi GROUP BY 1, 2, 3, 4
        ON CONFLICT (measurement_id, bucket, resource) DO UPDATE SET {pupd}"""
    return [blocks, totals, points]


# Call stacks have a minute and a ten-minute rollup (per stack and context; an hour of them is ~6 rows per
# stack and context), both summed below the minute watermark: the ten minutes from the minutes this pass
# summed. Their late rows are summed by the writer from the batch itself (app.storage.stacks.add_late).
STACKS_FROM_RAW = """
    INSERT INTO stack_samples_1m (host_id, bucket, stack_id, pid, comm, cpu, count)
    SELECT s.host_id, date_trunc('minute', s.ts), s.stack_id, u.pid, u.comm, u.cpu, sum(u.n)
    FROM stack_samples s, unnest(s.pids, s.comms, s.cpus, s.counts) AS u(pid, comm, cpu, n)
    WHERE s.ts >= :lo AND s.ts < :hi GROUP BY 1, 2, 3, 4, 5, 6
    ON CONFLICT (host_id, bucket, stack_id, pid, comm, cpu)
    DO UPDATE SET count = stack_samples_1m.count + excluded.count"""


def versioned_stack_blocks(insert_10m: str, renew: bool = True) -> str:
    """An INSERT into stack_samples_10m that also gives every ten-minute bucket it wrote a new version in
    `stack_blocks` (migration 0012), in the same statement: readers keep a closed block's sums by version
    (app.storage.stacks), and a late batch summed into the block must move it. With `renew` false a bucket
    keeps the version it has (one is given to a bucket without): for the rollup task's minutes, which are
    above the minute watermark, so no reader has summed them yet (closed minutes, and whole ten minutes
    only once all their minutes are below it); a view's kept sums of the bucket's earlier minutes stay
    usable as the bucket fills."""
    renewal = "DO UPDATE SET version = excluded.version" if renew else "DO NOTHING"
    return f"""
    WITH written AS ({insert_10m}
        RETURNING host_id, bucket)
    INSERT INTO stack_blocks (host_id, bucket, version)
    SELECT w.host_id, w.bucket, nextval('stack_block_version') FROM (SELECT DISTINCT host_id, bucket FROM written) w
    ON CONFLICT (host_id, bucket) {renewal}"""


STACKS_10M_FROM_MINUTES = versioned_stack_blocks(
    """
    INSERT INTO stack_samples_10m (host_id, bucket, stack_id, pid, comm, cpu, count)
    SELECT r.host_id, date_bin('10 minutes', r.bucket, TIMESTAMPTZ '2000-01-01 00:00:00+00'), r.stack_id, r.pid,
           r.comm, r.cpu, sum(r.count)
    FROM stack_samples_1m r WHERE r.bucket >= :lo AND r.bucket < :hi GROUP BY 1, 2, 3, 4, 5, 6
    ON CONFLICT (host_id, bucket, stack_id, pid, comm, cpu)
    DO UPDATE SET count = stack_samples_10m.count + excluded.count""",
    renew=False,
)

# Call stacks per kernel-build group (migration 0020): the minutes this pass summed per host, summed again per
# group, stack id and idle or not, and each host's part of them (its samples per group and idle or not), with
# each host's group as the pass is given it (:gh, :gg: the hosts' ids and their groups' ids; the hosts table is
# the coordinator's, and a database node's pass is handed it). The ten minutes from those minutes, as the
# per-host ten minutes are made. Late rows: app.storage.stacks.add_late, with the writer's groups.
_HOST_GROUPS = "unnest(CAST(:gh AS text[]), CAST(:gg AS text[])) AS g(host_id, group_id)"
# Each table's key: its unique index, the row's columns but the count.
STACK_GROUP_KEYS = {
    "stack_group_samples": "group_id, bucket, stack_id, idle",
    "stack_host_totals": "host_id, bucket, group_id, idle",
}


def _stack_sums(table: str, grain: str, select: str, source: str) -> str:
    """Sum `source`'s rows of [lo, hi) (alias r) into `table`_`grain`: `select` gives the key's columns."""
    key = STACK_GROUP_KEYS[table]
    return f"""
    INSERT INTO {table}_{grain} ({key}, count)
    SELECT {select}, sum(r.count) FROM {source} WHERE r.bucket >= :lo AND r.bucket < :hi GROUP BY 1, 2, 3, 4
    ON CONFLICT ({key}) DO UPDATE SET count = {table}_{grain}.count + excluded.count"""


_MINUTES = f"stack_samples_1m r JOIN {_HOST_GROUPS} ON g.host_id = r.host_id"
_TEN_R = "date_bin('10 minutes', r.bucket, TIMESTAMPTZ '2000-01-01 00:00:00+00')"
STACK_GROUPS_FROM_MINUTES = _stack_sums(
    "stack_group_samples", "1m", "g.group_id, r.bucket, r.stack_id, r.pid = 0", _MINUTES
)
STACK_HOST_TOTALS_FROM_MINUTES = _stack_sums(
    "stack_host_totals", "1m", "r.host_id, r.bucket, g.group_id, r.pid = 0", _MINUTES
)
STACK_GROUPS_10M_FROM_MINUTES = _stack_sums(
    "stack_group_samples", "10m", f"r.group_id, {_TEN_R}, r.stack_id, r.idle", "stack_group_samples_1m r"
)
STACK_HOST_TOTALS_10M_FROM_MINUTES = _stack_sums(
    "stack_host_totals", "10m", f"r.host_id, {_TEN_R}, r.group_id, r.idle", "stack_host_totals_1m r"
)

# Per-function sums (migrations 0016 and 0017: one row per host and bucket, its functions' ids, busy and idle
# samples as arrays in function id order; a write merges its sums into the row's), each grain from the
# finer one this pass has just written: the minute
# rows from the block minutes of [lo, hi) (above the old minute watermark, so nothing but this pass wrote
# them), the ten minutes from those minutes (a ten-minute bucket holds the sum of its minutes below the
# minute watermark; readers take only buckets wholly below it), the hours from the ten minutes of the
# hours the hour watermark passes (all below the minute watermark, so complete).
_TEN = "date_bin('10 minutes', bucket, TIMESTAMPTZ '2000-01-01 00:00:00+00')"


def _merge_functions(grain: str) -> str:
    """The upsert of one (host, bucket) row of a per-function rollup: the row's arrays and the new ones summed
    per function, in function id order (migration 0017)."""
    t = f"sample_functions_{grain}"
    return f"""
        ON CONFLICT (host_id, bucket) DO UPDATE SET (function_ids, busy_counts, idle_counts) = (
            SELECT array_agg(m.f ORDER BY m.f), array_agg(m.b ORDER BY m.f), array_agg(m.i ORDER BY m.f)
            FROM (SELECT u.f, sum(u.b)::bigint AS b, sum(u.i)::bigint AS i
                  FROM (SELECT * FROM unnest({t}.function_ids, {t}.busy_counts, {t}.idle_counts)
                        UNION ALL
                        SELECT * FROM unnest(excluded.function_ids, excluded.busy_counts, excluded.idle_counts))
                       AS u(f, b, i)
                  GROUP BY u.f) m)"""


def _functions_insert(grain: str, sums: str) -> str:
    """Insert per-function sums (`sums`: rows of host_id, bucket, f, b, i: busy and idle samples, one per host,
    bucket and function) into a per-function rollup as one row of arrays per host and bucket."""
    return f"""
        INSERT INTO sample_functions_{grain} (host_id, bucket, function_ids, busy_counts, idle_counts)
        SELECT host_id, bucket, array_agg(f ORDER BY f), array_agg(b ORDER BY f), array_agg(i ORDER BY f)
        FROM ({sums}) s GROUP BY 1, 2{_merge_functions(grain)}"""


def _functions_from(grain: str, source: str, bucket: str) -> str:
    if source == "sample_blocks_1m":
        sums = f"""SELECT host_id, {bucket} AS bucket, function_id AS f, sum(count - idle_count)::bigint AS b,
                   sum(idle_count)::bigint AS i
            FROM {source} WHERE bucket >= :lo AND bucket < :hi GROUP BY 1, 2, 3"""
    else:
        sums = f"""SELECT host_id, {bucket} AS bucket, u.f, sum(u.b)::bigint AS b, sum(u.i)::bigint AS i
            FROM {source} r, unnest(r.function_ids, r.busy_counts, r.idle_counts) AS u(f, b, i)
            WHERE bucket >= :lo AND bucket < :hi GROUP BY 1, 2, 3"""
    return _functions_insert(grain, sums)


_RAW_RANGE = "{a}.ts >= :lo AND {a}.ts < :hi"
MINUTE_FROM_RAW = [
    _blocks_from_raw("1m", _RAW_RANGE.format(a="s")),
    _functions_from("1m", "sample_blocks_1m", "bucket"),
    _functions_from("10m", "sample_functions_1m", _TEN),
    _totals_from_raw("1m", _RAW_RANGE.format(a="s")),
    _points_from_raw("1m", _RAW_RANGE.format(a="p")),
    STACKS_FROM_RAW,
    STACKS_10M_FROM_MINUTES,
    STACK_GROUPS_FROM_MINUTES,
    STACK_HOST_TOTALS_FROM_MINUTES,
    STACK_GROUPS_10M_FROM_MINUTES,
    STACK_HOST_TOTALS_10M_FROM_MINUTES,
]
HOUR_FROM_MINUTES = [*_hour_from_minutes(), _functions_from("1h", "sample_functions_10m", "date_trunc('hour', bucket)")]

# Running totals of the ten minutes within their hour (migration 0018): the row of (host, ten-minute bucket b)
# holds the sum of the host's ten-minute rows of b's hour up to and including b, so a reader takes a span of
# ten minutes inside one hour as one row (from the hour's start) or the difference of two, instead of a row
# per ten minutes. A row exists for each closed ten minutes (wholly below the minute watermark) from the
# host's first ten minutes with samples in the hour: the rollup task writes the ten minutes its pass closes
# from their hour's ten-minute rows (complete, being below the watermark), and the ingest writer adds its
# late sums of ten minutes b to the closed rows of b's hour from b on (`add_late_samples`).
RUNNING = "sample_functions_10m_run"
RUNNING_FROM_TEN = f"""
    INSERT INTO {RUNNING} (host_id, bucket, function_ids, busy_counts, idle_counts)
    SELECT host_id, b, array_agg(f ORDER BY f), array_agg(bs ORDER BY f), array_agg(i ORDER BY f)
    FROM (SELECT r.host_id, c.b, u.f, sum(u.b)::bigint AS bs, sum(u.i)::bigint AS i
          FROM sample_functions_10m r, unnest(r.function_ids, r.busy_counts, r.idle_counts) AS u(f, b, i),
               generate_series(greatest(r.bucket, CAST(:lo AS timestamptz)),
                               least(date_bin('1 hour', r.bucket, TIMESTAMPTZ '2000-01-01 00:00:00+00')
                                     + interval '50 minutes',
                                     CAST(:hi AS timestamptz) - interval '10 minutes'),
                               interval '10 minutes') AS c(b)
          WHERE r.bucket >= date_bin('1 hour', CAST(:lo AS timestamptz), TIMESTAMPTZ '2000-01-01 00:00:00+00')
            AND r.bucket < CAST(:hi AS timestamptz)
          GROUP BY 1, 2, 3) s
    GROUP BY 1, 2"""


# A host's kernel-build group (app.storage.fleet names groups by it): a digest of its kernel release and build id.
GROUP_ID_SQL = "md5(h.kernel_release || chr(10) || h.kernel_build_id)"


async def host_groups(conn: AsyncConnection, host_ids: Sequence[str] | None = None) -> dict[str, str]:
    """Each host's kernel-build group id (of these hosts, or of every host), from the coordinator's hosts."""
    where, params = ("WHERE h.id = ANY(:ids)", {"ids": list(host_ids)}) if host_ids is not None else ("", {})
    rows = await conn.execute(text(f"SELECT h.id, {GROUP_ID_SQL} AS g FROM hosts h {where}"), params)
    return {r.id: r.g for r in rows}


async def coordinator_groups(coordinator: AsyncEngine, host_ids: Sequence[str] | None = None) -> dict[str, str]:
    """`host_groups` over a connection of its own to the coordinator: for a database node's rollup pass and
    late batches, whose database has no hosts."""
    async with coordinator.connect() as conn:
        return await host_groups(conn, host_ids)


def _floor_ten(t: datetime) -> datetime:
    t = t.astimezone(UTC)
    return t.replace(minute=t.minute // 10 * 10, second=0, microsecond=0)


# Late measurement points of one writer transaction: its batch token, and each row's measurement and time,
# so the statement finds them through the (measurement_id, ts) index instead of reading every raw row
# between the oldest late one and the watermark (which, for an agent's spool resent an hour late, is
# every host's hour, in every commit).
_LATE = (
    "{a}.batch = :batch AND {a}.ts >= :lo AND {a}.ts < :hi AND ({a}.measurement_id, {a}.ts) IN "
    "(SELECT k, t FROM unnest(CAST(:keys AS text[]), CAST(:times AS timestamptz[])) AS u(k, t))"
)
LATE_POINTS = {g: [_points_from_raw(g, _LATE.format(a="p"))] for g in ("1m", "1h")}


def _late_blocks(grain: str) -> str:
    return f"""
        INSERT INTO sample_blocks_{grain} (host_id, bucket, function_id, block_offset, count, idle_count)
        SELECT * FROM unnest(CAST(:h AS text[]), CAST(:b AS timestamptz[]), CAST(:f AS bigint[]),
                             CAST(:o AS integer[]), CAST(:c AS bigint[]), CAST(:i AS bigint[]))
        ON CONFLICT (host_id, bucket, function_id, block_offset)
        DO UPDATE SET count = sample_blocks_{grain}.count + excluded.count,
                      idle_count = sample_blocks_{grain}.idle_count + excluded.idle_count"""


def _late_totals(grain: str) -> str:
    cols = ", ".join(("covered_ms", *_TOTALS))
    arrays = ", ".join(f"CAST(:t{k} AS bigint[])" for k in range(len(_TOTALS) + 1))
    upd = ", ".join(f"{c} = sample_totals_{grain}.{c} + excluded.{c}" for c in ("covered_ms", *_TOTALS))
    return f"""
        INSERT INTO sample_totals_{grain} (host_id, bucket, {cols})
        SELECT * FROM unnest(CAST(:h AS text[]), CAST(:b AS timestamptz[]), {arrays})
        ON CONFLICT (host_id, bucket) DO UPDATE SET {upd}"""


def _late_functions(grain: str) -> str:
    return _functions_insert(
        grain,
        """SELECT * FROM unnest(CAST(:h AS text[]), CAST(:b AS timestamptz[]), CAST(:f AS bigint[]),
                                CAST(:c AS bigint[]), CAST(:i AS bigint[])) AS u(host_id, bucket, f, b, i)""",
    )


LATE_BLOCKS = {g: _late_blocks(g) for g in ("1m", "1h")}
LATE_FUNCTIONS = {g: _late_functions(g) for g in (*FUNCTION_GRAINS, "10m_run")}
LATE_TOTALS = {g: _late_totals(g) for g in ("1m", "1h")}


@dataclass(slots=True)
class LateInterval:
    """What the rollups keep of one sample interval the writer stored below a watermark: its host, time,
    length, totals (TOTALS order) and per-block counts, with whether each block entry is the idle task's."""

    host_id: str
    ts: datetime
    interval_ms: int
    totals: tuple[int, ...]
    function_ids: Sequence[int]
    block_offsets: Sequence[int]
    counts: Sequence[int]
    idles: Sequence[bool] | None


def _bucket(t: datetime, grain: str) -> datetime:
    t = t.astimezone(UTC).replace(second=0, microsecond=0)
    if grain == "1m":
        return t
    return t.replace(minute=t.minute // 10 * 10) if grain == "10m" else t.replace(minute=0)


def _floor_minute(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(second=0, microsecond=0)


async def watermarks(conn: AsyncConnection, for_share: bool = False) -> tuple[datetime, datetime]:
    lock = " FOR SHARE" if for_share else ""
    row = (
        await conn.execute(text(f"SELECT watermark_1m, watermark_1h FROM series_state WHERE name = 'rollups'{lock}"))
    ).one()
    return row.watermark_1m, row.watermark_1h


def _running(
    functions: dict[tuple[str, datetime, int], list[int]], wm_1m: datetime
) -> dict[tuple[str, datetime, int], list[int]]:
    """The late sums of ten-minute buckets as additions to the running totals of their hours: the sums of ten
    minutes b go into every closed ten minutes of b's hour from b on (none while b is still open: the rollup
    task writes its running total once it closes, from the ten-minute rows, late sums included)."""
    closed = _floor_ten(wm_1m)
    out: dict[tuple[str, datetime, int], list[int]] = {}
    for (h, b, f), (c, i) in functions.items():
        end = min(b.astimezone(UTC).replace(minute=0) + timedelta(hours=1), closed)
        t = b
        while t < end:
            sums = out.setdefault((h, t, f), [0, 0])
            sums[0] += c
            sums[1] += i
            t += TEN_MINUTES
    return out


async def _late_function_sums(
    conn: AsyncConnection, table: str, functions: dict[tuple[str, datetime, int], list[int]]
) -> None:
    if not functions:
        return
    fkeys = list(functions)
    await conn.execute(
        text(LATE_FUNCTIONS[table]),
        {
            "h": [k[0] for k in fkeys],
            "b": [k[1] for k in fkeys],
            "f": [k[2] for k in fkeys],
            "c": [functions[k][0] - functions[k][1] for k in fkeys],
            "i": [functions[k][1] for k in fkeys],
        },
    )


async def add_late_samples(
    conn: AsyncConnection, intervals: Sequence[LateInterval], wm_1m: datetime, wm_1h: datetime
) -> None:
    """Sum the sample intervals this transaction wrote below the watermarks into the rollups, from the rows
    themselves (one statement per table and grain, whatever the raw rows around them). The ten-minute
    function rollup takes what lies below the minute watermark, as the minute rollups do."""
    for grain, hi in (("1m", wm_1m), ("10m", wm_1m), ("1h", wm_1h)):
        blocks: dict[tuple[str, datetime, int, int], list[int]] = {}
        totals: dict[tuple[str, datetime], list[int]] = {}
        for s in intervals:
            if s.ts >= hi:
                continue
            b = _bucket(s.ts, grain)
            idles = s.idles if s.idles is not None else [False] * len(s.counts)
            for f, o, c, idle in zip(s.function_ids, s.block_offsets, s.counts, idles, strict=True):
                sums = blocks.setdefault((s.host_id, b, f, o), [0, 0])
                sums[0] += c
                if idle:
                    sums[1] += c
            row = totals.setdefault((s.host_id, b), [0] * (len(_TOTALS) + 1))
            for k, v in enumerate((s.interval_ms, *s.totals)):
                row[k] += v
        if blocks:
            functions: dict[tuple[str, datetime, int], list[int]] = {}
            for (h, b, f, _o), (c, i) in blocks.items():
                fsums = functions.setdefault((h, b, f), [0, 0])
                fsums[0] += c
                fsums[1] += i
            await _late_function_sums(conn, grain, functions)
            if grain == "10m":
                await _late_function_sums(conn, "10m_run", _running(functions, wm_1m))
        if blocks and grain in LATE_BLOCKS:
            keys = list(blocks)
            await conn.execute(
                text(LATE_BLOCKS[grain]),
                {
                    "h": [k[0] for k in keys],
                    "b": [k[1] for k in keys],
                    "f": [k[2] for k in keys],
                    "o": [k[3] for k in keys],
                    "c": [blocks[k][0] for k in keys],
                    "i": [blocks[k][1] for k in keys],
                },
            )
        if totals and grain in LATE_TOTALS:
            tkeys = list(totals)
            params: dict[str, Any] = {"h": [k[0] for k in tkeys], "b": [k[1] for k in tkeys]}
            for n in range(len(_TOTALS) + 1):
                params[f"t{n}"] = [totals[k][n] for k in tkeys]
            await conn.execute(text(LATE_TOTALS[grain]), params)


async def add_late_points(
    conn: AsyncConnection, batch: int, rows: Sequence[tuple[str, datetime]], wm_1m: datetime, wm_1h: datetime
) -> None:
    """Sum the measurement points this transaction wrote (batch token; their measurement and time in `rows`)
    below the watermarks into the rollups."""
    for grain, hi in (("1m", wm_1m), ("1h", wm_1h)):
        late = [(m, t) for m, t in rows if t < hi]
        if not late:
            continue
        params = {
            "batch": batch,
            "lo": min(t for _m, t in late),
            "hi": hi,
            "keys": [m for m, _t in late],
            "times": [t for _m, t in late],
        }
        for sql in LATE_POINTS[grain]:
            await conn.execute(text(sql), params)


async def run_once(
    engine: AsyncEngine,
    now: datetime | None = None,
    lag_s: float = 10.0,
    groups: Mapping[str, str] | None = None,
) -> tuple[int, int]:
    """Advance the rollups over completed buckets; returns the minutes and hours summed (0, 0 when
    another replica holds the task). `groups`: each host's kernel-build group, for the call stacks' group
    rollups (None: read from this database's hosts table, the coordinator's; a database node has none and is
    handed the coordinator's)."""
    now = now or datetime.now(UTC)
    minutes = hours = 0
    async with engine.begin() as conn:
        if not (await conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": LOCK_KEY})).scalar_one():
            return 0, 0
        if groups is None:
            groups = await host_groups(conn)
        gh, gg = list(groups), list(groups.values())
        wm_1m, wm_1h = (
            await conn.execute(
                text("SELECT watermark_1m, watermark_1h FROM series_state WHERE name = 'rollups' FOR UPDATE")
            )
        ).one()
        target = _floor_minute(now - timedelta(seconds=lag_s))
        closed = _floor_ten(wm_1m)
        while wm_1m < target:
            hi = min(target, wm_1m + MAX_STEP)
            for sql in MINUTE_FROM_RAW:
                await conn.execute(text(sql), {"lo": wm_1m, "hi": hi, "gh": gh, "gg": gg})
            minutes += int((hi - wm_1m).total_seconds() // 60)
            wm_1m = hi
        if _floor_ten(wm_1m) > closed:
            await conn.execute(text(RUNNING_FROM_TEN), {"lo": closed, "hi": _floor_ten(wm_1m)})
        hour_target = wm_1m.replace(minute=0)
        if hour_target > wm_1h:
            for sql in HOUR_FROM_MINUTES:
                await conn.execute(text(sql), {"lo": wm_1h, "hi": hour_target})
            hours = int((hour_target - wm_1h).total_seconds() // 3600)
            wm_1h = hour_target
        await conn.execute(
            text("""
            UPDATE series_state SET watermark_1m = :m, watermark_1h = :h WHERE name = 'rollups'"""),
            {"m": wm_1m, "h": wm_1h},
        )
    return minutes, hours
