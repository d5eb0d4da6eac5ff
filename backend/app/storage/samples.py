# SPDX-License-Identifier: Apache-2.0
"""The time series: the only module routes use to read or write them — the host's sample series
(`sample_intervals` and its rollups) and the measurements' points (`measurement_points` and its
rollups).

Storage is `app.storage.series`: raw rows partitioned by hour (one row per host and interval, block counts in
arrays; one row per measurement and interval), 1-minute and 1-hour rollups maintained incrementally,
retention by dropping partitions, and the ingest writer that stores every agent's data messages in
group commits. Reading: every question the console asks, each over a `TimeRange` — top functions,
per-function and per-block counts, hotness, the host's samples over time, two ranges compared, a
measurement's values and its series. A range is read from the coarsest rollup that covers whole
buckets of it (hours, then minutes) and from the raw rows for the rest, so a day costs about as much
as a few minutes. Routes never touch the tables, so moving the series to another engine changes this
module and `app.storage.series` only, not the routes' contracts.

A range is either the last `window_s` seconds of the host's own samples (measured against the newest
interval the host reported, never against this server's clock, so a host whose clock differs still shows
its data) or an absolute [from, to) interval; an interval belongs to a range when its start does.
Rates are samples per second of the range's length.

Idle: a CPU with nothing to run runs the kernel's idle task (pid 0), and a whole-system sampler sees
it there. Agents tell each sample's context, so idle samples are exact: each block entry's idle flag
(`sample_intervals.idles`, `idle_count` in the rollups) and the interval's `idle_samples` (an interrupt
handled while idle counts as idle too). For batches from
agents that do not report context, the samples in the kernel's idle-loop functions (`IDLE_FUNCTION_RE`)
are marked idle when they are stored. Idle samples are counted apart and left out of rankings unless
asked for, because they are not work.

Samples for a module whose catalog piece is not yet stored cannot be mapped to a function id; they are
dropped and counted (the interval's dropped_samples, and the agent session's counter), because an
interval's hotness is only useful while it is recent and the catalog arrives within seconds.
"""

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app.core.db import describe_error
from app.storage import stacks as stack_store
from app.storage.ingest import IngestWriter, Item, MeasurementUpdate, PointRow, SampleRow
from app.storage.series import partitions, rollups
from app.storage.series.layout import COVERAGE_RESOURCE, NSLOTS, SLOTS, TOTALS

__all__ = ["IngestWriter", "Item", "MeasurementUpdate", "PointRow", "SampleRow"]
log = logging.getLogger("hotpath.series")

# The kernel's idle loop on x86-64: the functions a sampled CPU is in when it has nothing to run
# (halted, polling or in a cpuidle driver). Matched against whole names.
IDLE_FUNCTION_RE = (
    r"^(pv_native_safe_halt|native_safe_halt|native_halt|default_idle|default_idle_call|"
    r"arch_cpu_idle|cpu_idle_poll|do_idle|poll_idle|acpi_safe_halt|acpi_idle_.*|intel_idle.*|"
    r"mwait_idle.*|amd_e400_idle|cpuidle_enter.*|xen_safe_halt|hlt_play_dead)$"
)

# Steps of the timeline's buckets, in seconds: a range is cut into at most `points` buckets of the
# smallest step that allows it, so bucket edges stay on round times.
NICE_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


@dataclass(frozen=True)
class RangeSpec:
    """What a request asked for: the last `window_s` seconds, or an absolute [start, end)."""

    window_s: int | None = None
    start: datetime | None = None
    end: datetime | None = None


@dataclass(frozen=True)
class TimeRange:
    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return max(1e-3, (self.end - self.start).total_seconds())

    def public(self) -> dict[str, Any]:
        return {"from": self.start, "to": self.end, "seconds": self.seconds}


def interval_start(unix_ns: int) -> datetime:
    return datetime.fromtimestamp(unix_ns / 1e9, tz=UTC)


def _absolute(spec: RangeSpec) -> TimeRange | None:
    """The spec's own range when it gives both ends, else None (it is a window)."""
    return TimeRange(spec.start, spec.end) if spec.start is not None and spec.end is not None else None


def _window_to(spec: RangeSpec, end: datetime) -> TimeRange:
    """The spec's window (`window_s`, 10 s when unset) ending at `end`."""
    return TimeRange(end - timedelta(seconds=spec.window_s or 10), end)


async def resolve(session: AsyncSession, host_id: str, spec: RangeSpec) -> TimeRange | None:
    """The absolute range a spec means for this host; None for a window on a host with no samples."""
    if (absolute := _absolute(spec)) is not None:
        return absolute
    row = (
        await session.execute(
            text("""
        SELECT ts, interval_ms FROM sample_intervals WHERE host_id = :h ORDER BY ts DESC LIMIT 1"""),
            {"h": host_id},
        )
    ).first()
    if row is None:
        return None
    return _window_to(spec, row.ts + timedelta(milliseconds=row.interval_ms))


def empty_range(spec: RangeSpec) -> TimeRange:
    """A range for a host without samples, so responses still say what they cover."""
    return _absolute(spec) or _window_to(spec, datetime.now(UTC))


# Where a range is read from -----------------------------------------------------------------------

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


def _floor(t: datetime, step: timedelta) -> datetime:
    t = t.astimezone(UTC)
    return t.replace(second=0, microsecond=0) if step == MINUTE else t.replace(minute=0, second=0, microsecond=0)


def _ceil(t: datetime, step: timedelta) -> datetime:
    f = _floor(t, step)
    return f if f == t else f + step


def plan(
    start: datetime, end: datetime, wm_1m: datetime, wm_1h: datetime, grain: timedelta | None = None
) -> list[tuple[str, datetime, datetime]]:
    """Cut [start, end) into spans read from the hour rollups, the minute rollups and the raw rows:
    whole hours below the hour watermark, whole minutes below the minute watermark, raw rows for the
    rest. `grain` limits the rollups used (a 30 s timeline bucket cannot come from a minute rollup)."""
    out: list[tuple[str, datetime, datetime]] = []
    if end <= start:
        return out
    use_min = grain is None or (grain >= MINUTE and grain % MINUTE == timedelta(0))
    use_hour = use_min and (grain is None or (grain >= HOUR and grain % HOUR == timedelta(0)))
    m0, m1 = _ceil(start, MINUTE), _floor(min(end, wm_1m), MINUTE)
    if not use_min or m0 >= m1:
        return [("raw", start, end)]
    h0, h1 = _ceil(start, HOUR), _floor(min(end, wm_1h), HOUR)
    if use_hour and h0 < h1 and m0 <= h0 and h1 <= m1:
        out.append(("1h", h0, h1))
        spans = [(m0, h0), (h1, m1)]
    else:
        spans = [(m0, m1)]
    out.extend(("1m", lo, hi) for lo, hi in spans if lo < hi)
    if start < m0:
        out.append(("raw", start, m0))
    if m1 < end:
        out.append(("raw", m1, end))
    return out


async def _watermarks(session: AsyncSession) -> tuple[datetime, datetime]:
    return await rollups.watermarks(await session.connection())


def _blocks_sql(
    spans: list[tuple[str, datetime, datetime]],
    host_param: str = "h",
    prefix: str = "",
    function_param: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """A SELECT of (function_id, block_offset, count, idle_count, t) over the spans: idle_count of count
    are the idle task's; t is the interval's or bucket's start."""
    parts: list[str] = []
    params: dict[str, Any] = {}
    for i, (src, lo, hi) in enumerate(spans):
        a, b = f"{prefix}lo{i}", f"{prefix}hi{i}"
        params[a], params[b] = lo, hi
        if src == "raw":
            fn = f" AND u.f = :{function_param}" if function_param else ""
            parts.append(f"""SELECT u.f AS function_id, u.o AS block_offset, u.c AS count,
                       CASE WHEN u.i THEN u.c ELSE 0 END AS idle_count, s.ts AS t
                FROM sample_intervals s, unnest(s.function_ids, s.block_offsets, s.counts, s.idles) AS u(f, o, c, i)
                WHERE s.host_id = :{host_param} AND s.ts >= :{a} AND s.ts < :{b}{fn}""")
        else:
            fn = f" AND function_id = :{function_param}" if function_param else ""
            parts.append(f"""SELECT function_id, block_offset, count, idle_count, bucket AS t FROM sample_blocks_{src}
                WHERE host_id = :{host_param} AND bucket >= :{a} AND bucket < :{b}{fn}""")
    if not parts:
        return (
            "SELECT NULL::bigint AS function_id, NULL::integer AS block_offset, 0::bigint AS count, "
            "0::bigint AS idle_count, NULL::timestamptz AS t WHERE false"
        ), params
    return " UNION ALL ".join(parts), params


_TOTAL_COLS = TOTALS


def _totals_sql(spans: list[tuple[str, datetime, datetime]]) -> tuple[str, dict[str, Any]]:
    """A SELECT of (t, ms, total_samples, user_samples, ...) over the spans."""
    cols = ", ".join(_TOTAL_COLS)
    parts: list[str] = []
    params: dict[str, Any] = {}
    for i, (src, lo, hi) in enumerate(spans):
        a, b = f"tlo{i}", f"thi{i}"
        params[a], params[b] = lo, hi
        if src == "raw":
            parts.append(
                f"SELECT ts AS t, interval_ms::bigint AS ms, {cols} FROM sample_intervals "
                f"WHERE host_id = :h AND ts >= :{a} AND ts < :{b}"
            )
        else:
            parts.append(
                f"SELECT bucket AS t, covered_ms AS ms, {cols} FROM sample_totals_{src} "
                f"WHERE host_id = :h AND bucket >= :{a} AND bucket < :{b}"
            )
    if not parts:
        zero = ", ".join(f"0::bigint AS {c}" for c in _TOTAL_COLS)
        return f"SELECT NULL::timestamptz AS t, 0::bigint AS ms, {zero} WHERE false", params
    return " UNION ALL ".join(parts), params


# Coverage and gaps -------------------------------------------------------------------------------


async def coverage(session: AsyncSession, host_id: str, window_s: int, buckets: int) -> dict[str, Any]:
    """Coverage of the last `window_s` seconds (by our clock) in `buckets` buckets, and the recorded gaps."""
    bucket_s = max(1, window_s // buckets)
    end = (await session.execute(text("SELECT now()"))).scalar_one()
    start = end - timedelta(seconds=bucket_s * buckets)
    rows = await session.execute(
        text("""
        SELECT floor(extract(epoch FROM (ts - :start)) / :b)::int AS i, sum(interval_ms)::bigint AS ms
        FROM sample_intervals WHERE host_id = :h AND ts >= :start AND ts < :end GROUP BY 1"""),
        {"h": host_id, "start": start, "end": end, "b": bucket_s},
    )
    covered = {r.i: int(r.ms) for r in rows}
    gaps = await session.execute(
        text("""
        SELECT id, start_ts, end_ts, messages, reason, source FROM data_gaps
        WHERE host_id = :h AND end_ts >= :start ORDER BY start_ts LIMIT 500"""),
        {"h": host_id, "start": start},
    )
    return {
        "start": start,
        "end": end,
        "bucket_s": bucket_s,
        "buckets": [
            {"start": start + timedelta(seconds=i * bucket_s), "covered_ms": min(covered.get(i, 0), bucket_s * 1000)}
            for i in range(buckets)
        ],
        "gaps": [
            {
                "id": g.id,
                "start": g.start_ts,
                "end": g.end_ts,
                "messages": g.messages,
                "reason": g.reason,
                "source": g.source,
            }
            for g in gaps
        ],
    }


async def delete_host_series(session: AsyncSession, host_id: str) -> None:
    """Delete a host's series (its gaps, measurements and commands go with its host row)."""
    for table in (
        "sample_intervals",
        "sample_blocks_1m",
        "sample_blocks_1h",
        "sample_totals_1m",
        "sample_totals_1h",
        "sample_functions_1m",
        "sample_functions_10m",
        "sample_functions_1h",
        "sample_functions_10m_run",
        "measurement_points",
        "measurement_points_1m",
        "measurement_points_1h",
    ):
        await session.execute(text(f"DELETE FROM {table} WHERE host_id = :h"), {"h": host_id})
    await stack_store.delete_host(session, host_id)


# Maintenance: partitions, retention, rollups ------------------------------------------------------


async def maintain(
    engine: AsyncEngine,
    retention_hours: float,
    rollup_retention_hours: float | None = None,
    now: datetime | None = None,
    audit_retention_days: float | None = None,
    stack_retention_hours: float | None = None,
) -> int:
    """Create the partitions the accepted window needs, drop those past the retention (raw rows after
    `retention_hours`, call stacks after `stack_retention_hours` when shorter, rollups after
    `rollup_retention_hours`, default the same), and delete stack definitions nothing refers to, gaps,
    old delivery marks and (when given) audit records past theirs. Returns the sample intervals
    dropped. Each of the three steps runs when another failed (creating partitions fails first on a full
    disk, and dropping expired ones is what frees space): a failed step is logged with its reason, and the
    first failure is raised once all have run."""
    now = now or datetime.now(UTC)
    raw = timedelta(hours=retention_hours)
    rolled = timedelta(hours=rollup_retention_hours if rollup_retention_hours is not None else retention_hours)
    stack_keep = timedelta(hours=stack_retention_hours) if stack_retention_hours is not None else None
    failed: list[Exception] = []
    rows = 0

    async def step(what: str, run: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await run()
        except Exception as exc:  # noqa: BLE001 - the other steps still run; raised below
            log.warning("series maintenance: %s failed (%s)", what, describe_error(exc))
            failed.append(exc)
            return None

    await step("creating partitions ahead", lambda: partitions.ensure(engine, now, raw, rolled))
    dropped = await step(
        "dropping expired partitions", lambda: partitions.drop_expired(engine, now, raw, rolled, stack_keep)
    )
    if dropped is not None:
        rows = dropped[1]
    await step(
        "deleting expired records",
        lambda: _delete_expired(engine, now, raw, retention_hours, stack_keep, audit_retention_days),
    )
    if failed:
        raise failed[0]
    return rows


async def _delete_expired(
    engine: AsyncEngine,
    now: datetime,
    raw: timedelta,
    retention_hours: float,
    stack_keep: timedelta | None,
    audit_retention_days: float | None,
) -> None:
    """Stack definitions nothing refers to, gaps, delivery marks, finished commands and audit records past
    their retention (see maintain)."""
    cutoff = now - raw
    async with engine.begin() as conn:
        await stack_store.prune_definitions(conn, now - min(raw, stack_keep or raw))
        await conn.execute(text("DELETE FROM data_gaps WHERE end_ts < :c"), {"c": cutoff})
        await conn.execute(
            text("DELETE FROM delivery_marks WHERE updated_at < :c"),
            {"c": now - timedelta(hours=max(retention_hours, 24) * 2)},
        )
        await conn.execute(
            text("""
            DELETE FROM commands WHERE finished_at < :c AND state IN ('done', 'failed', 'cancelled')"""),
            {"c": now - max(raw, timedelta(days=7))},
        )
        if audit_retention_days is not None:
            await conn.execute(
                text("DELETE FROM audit_log WHERE at < :c"), {"c": now - timedelta(days=audit_retention_days)}
            )


async def prune_samples(
    engine: AsyncEngine,
    retention_hours: float,
    now: datetime | None = None,
    audit_retention_days: float | None = None,
    stack_retention_hours: float | None = None,
) -> int:
    """Retention: drop the series partitions past `retention_hours` (see maintain)."""
    return await maintain(engine, retention_hours, None, now, audit_retention_days, stack_retention_hours)


async def roll_up(
    engine: AsyncEngine, now: datetime | None = None, lag_s: float = 10.0, groups: dict[str, str] | None = None
) -> tuple[int, int]:
    """Advance the minute and hour rollups over completed buckets (see app.storage.series.rollups); a database
    node's pass is given the coordinator's hosts' groups (`host_groups`)."""
    return await rollups.run_once(engine, now, lag_s, groups)


async def host_groups(engine: AsyncEngine) -> dict[str, str]:
    """Every host's kernel-build group id, from the coordinator's hosts."""
    return await rollups.coordinator_groups(engine)


async def function_names(engine: AsyncEngine, ids: list[int]) -> dict[int, str]:
    if not ids:
        return {}
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT id, name FROM functions WHERE id = ANY(:ids)"), {"ids": ids})
        return {r[0]: r[1] for r in rows}


async def idle_function_indexes(engine: AsyncEngine, digest: str) -> set[int]:
    """Indexes of a catalog piece's idle-loop functions (counted as idle when samples are stored)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT index FROM functions WHERE digest = :d AND name ~ :idle"),
            {"d": digest, "idle": IDLE_FUNCTION_RE},
        )
        return {r[0] for r in rows}


# Reading samples ----------------------------------------------------------------------------------


async def function_totals_sql(session: AsyncSession, r: TimeRange | None) -> tuple[str, dict[str, Any]]:
    """A SELECT of (function_id, s) — samples per function in the range — for other queries to join
    (the host is the caller's :h)."""
    if r is None:
        return "SELECT NULL::bigint AS function_id, 0::numeric AS s WHERE false", {}
    wm_1m, wm_1h = await _watermarks(session)
    src, params = _blocks_sql(plan(r.start, r.end, wm_1m, wm_1h), prefix="ft")
    return f"SELECT function_id, sum(count) AS s FROM ({src}) AS b GROUP BY function_id", params


async def function_work_sql(session: AsyncSession, r: TimeRange, include_idle: bool) -> tuple[str, dict[str, Any]]:
    """A SELECT of (function_id, s, idle_s, all_s): samples per function in the range (the idle task's
    left out unless include_idle), of all its samples the idle task's, and all of them."""
    wm_1m, wm_1h = await _watermarks(session)
    src, params = _blocks_sql(plan(r.start, r.end, wm_1m, wm_1h), prefix="fw")
    return (
        f"""SELECT function_id, sum(count) - CASE WHEN :include_idle THEN 0 ELSE sum(idle_count) END AS s,
                       sum(idle_count) AS idle_s, sum(count) AS all_s
                FROM ({src}) AS b GROUP BY function_id""",
        {**params, "include_idle": include_idle},
    )


async def totals(session: AsyncSession, host_id: str, r: TimeRange) -> dict[str, int]:
    """Whole-host totals of a range: all samples, user, kernel (all − user), idle (the idle task's),
    outside known functions, lost; and how many samples carried a call stack."""
    wm_1m, wm_1h = await _watermarks(session)
    src, params = _totals_sql(plan(r.start, r.end, wm_1m, wm_1h))
    row = (
        await session.execute(
            text(f"""
        SELECT coalesce(sum(total_samples), 0) AS total, coalesce(sum(user_samples), 0) AS "user",
               coalesce(sum(unmapped_samples), 0) AS unmapped, coalesce(sum(lost_samples), 0) AS lost,
               coalesce(sum(idle_samples), 0) AS idle, coalesce(sum(stack_samples), 0) AS stacks
        FROM ({src}) AS t"""),
            {**params, "h": host_id},
        )
    ).one()
    total, user = int(row.total), int(row.user)
    return {
        "total_samples": total,
        "user_samples": user,
        "kernel_samples": total - user,
        "idle_samples": int(row.idle),
        "unmapped_samples": int(row.unmapped),
        "lost_samples": int(row.lost),
        "stack_samples": int(row.stacks),
    }


_TOP_SORTS = {
    "samples": "hot.s {dir}, f.name, f.id",
    "name": "f.name {dir}, f.id",
    "module": "module {dir}, hot.s DESC, f.name",
}


async def top_functions(
    session: AsyncSession,
    host_id: str,
    spec: RangeSpec,
    limit: int,
    offset: int = 0,
    sort: str = "samples",
    descending: bool = True,
    include_idle: bool = False,
) -> dict[str, Any]:
    """Functions by self samples in the range (or by inclusive samples, from call stacks); share is of
    all samples of the host (kernel and user). inclusive_samples is null when the range has no stacks."""
    r = await resolve(session, host_id, spec)
    if r is None:
        out = empty_range(spec)
        return {
            **out.public(),
            "window_s": spec.window_s or round(out.seconds),
            "total_samples": 0,
            "user_samples": 0,
            "kernel_samples": 0,
            "idle_samples": 0,
            "unmapped_samples": 0,
            "lost_samples": 0,
            "stack_samples": 0,
            "functions": 0,
            "items": [],
        }
    sums = await totals(session, host_id, r)
    inclusive: dict[int, int] | None = None
    if sums["stack_samples"] > 0:
        inclusive, _, _ = await stack_store.inclusive_by_function(session, host_id, r.start, r.end, include_idle)
    by_inclusive = sort == "inclusive" and inclusive is not None
    hot_sql, params = await function_work_sql(session, r, include_idle)
    order = _TOP_SORTS["samples" if sort == "inclusive" else sort].format(dir="DESC" if descending else "ASC")
    page = "" if by_inclusive else "LIMIT :limit OFFSET :offset"
    rows = (
        await session.execute(
            text(f"""
        WITH hot AS ({hot_sql})
        SELECT hot.function_id, hot.s, f.name, coalesce(hm.name, '') AS module,
               coalesce(hot.idle_s, 0) * 2 > hot.all_s AS idle,
               CASE WHEN hm.base_address + f."offset" < 0
                    THEN (hm.base_address + f."offset")::numeric + 18446744073709551616
                    ELSE (hm.base_address + f."offset")::numeric END AS address,
               to_hex(hm.base_address + f."offset") AS address_hex,
               count(*) OVER () AS n
        FROM hot JOIN functions f ON f.id = hot.function_id
        LEFT JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :h AND hm.target_id = 'kernel'
        WHERE hot.s > 0
        ORDER BY {order} {page}"""),
            {**params, "h": host_id, "limit": limit, "offset": offset},
        )
    ).all()
    total = sums["total_samples"]
    items = []
    for row in rows:
        s = int(row.s)
        items.append(
            {
                "function_id": row.function_id,
                "name": row.name,
                "module": row.module,
                "address": int(row.address) if row.address is not None else None,
                "address_hex": row.address_hex,
                "samples": s,
                "samples_per_sec": s / r.seconds,
                "share": (s / total) if total else 0.0,
                "idle": bool(row.idle),
                "inclusive_samples": (max(inclusive.get(row.function_id, 0), s) if inclusive is not None else None),
            }
        )
    if by_inclusive:
        assert inclusive is not None
        # Functions that only call (no self samples) rank by what they include too.
        have = {i["function_id"] for i in items}
        extra = [fid for fid in inclusive if fid not in have]
        for row in (
            (
                await session.execute(
                    text("""
                SELECT f.id AS function_id, f.name, coalesce(hm.name, '') AS module,
                       CASE WHEN hm.base_address + f."offset" < 0
                            THEN (hm.base_address + f."offset")::numeric + 18446744073709551616
                            ELSE (hm.base_address + f."offset")::numeric END AS address,
                       to_hex(hm.base_address + f."offset") AS address_hex
                FROM functions f
                LEFT JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :h AND hm.target_id = 'kernel'
                WHERE f.id = ANY(:ids)"""),
                    {"h": host_id, "ids": extra},
                )
            ).all()
            if extra
            else []
        ):
            items.append(
                {
                    "function_id": row.function_id,
                    "name": row.name,
                    "module": row.module,
                    "address": int(row.address) if row.address is not None else None,
                    "address_hex": row.address_hex,
                    "samples": 0,
                    "samples_per_sec": 0.0,
                    "share": 0.0,
                    "idle": False,
                    "inclusive_samples": inclusive[row.function_id],
                }
            )
        items.sort(key=lambda i: (-i["inclusive_samples"] if descending else i["inclusive_samples"], i["name"]))
        n = len(items)
        items = items[offset : offset + limit]
    else:
        n = int(rows[0].n) if rows else await _ranked_count(session, host_id, r, include_idle) if offset else 0
    return {**r.public(), "window_s": spec.window_s or round(r.seconds), **sums, "functions": n, "items": items}


async def hot_blocks(session: AsyncSession, host_id: str, r: TimeRange, limit: int) -> dict[int, dict[int, int]]:
    """The `limit` functions with the most samples in the range (the idle task's left out), each with
    its samples per block offset (blocks without samples absent)."""
    wm_1m, wm_1h = await _watermarks(session)
    src, params = _blocks_sql(plan(r.start, r.end, wm_1m, wm_1h), prefix="hb")
    rows = await session.execute(
        text(f"""
        WITH per AS (SELECT function_id, block_offset, sum(count) - sum(idle_count) AS s
                     FROM ({src}) AS b GROUP BY function_id, block_offset),
             top AS (SELECT function_id FROM per GROUP BY function_id HAVING sum(s) > 0
                     ORDER BY sum(s) DESC, function_id LIMIT :limit)
        SELECT per.function_id, per.block_offset, per.s FROM per JOIN top USING (function_id) WHERE per.s > 0"""),
        {**params, "h": host_id, "limit": limit},
    )
    out: dict[int, dict[int, int]] = {}
    for row in rows:
        out.setdefault(int(row.function_id), {})[int(row.block_offset)] = int(row.s)
    return out


async def _ranked_count(session: AsyncSession, host_id: str, r: TimeRange, include_idle: bool) -> int:
    hot_sql, params = await function_work_sql(session, r, include_idle)
    n: int = (
        await session.execute(
            text(f"""
        WITH hot AS ({hot_sql})
        SELECT count(*) FROM hot JOIN functions f ON f.id = hot.function_id WHERE hot.s > 0"""),
            {**params, "h": host_id},
        )
    ).scalar_one()
    return n


async def hotness(session: AsyncSession, host_id: str, spec: RangeSpec) -> dict[str, Any]:
    """Samples per second of every function with samples in the range."""
    r = await resolve(session, host_id, spec)
    if r is None:
        out = empty_range(spec)
        return {**out.public(), "window_s": spec.window_s or round(out.seconds), "items": []}
    hot_sql, params = await function_totals_sql(session, r)
    rows = await session.execute(text(f"{hot_sql} ORDER BY s DESC"), {**params, "h": host_id})
    items = [{"function_id": row.function_id, "samples_per_sec": float(row.s) / r.seconds} for row in rows]
    return {**r.public(), "window_s": spec.window_s or round(r.seconds), "items": items}


async def function_rate(session: AsyncSession, host_id: str, function_id: int, spec: RangeSpec) -> float:
    r = await resolve(session, host_id, spec)
    if r is None:
        return 0.0
    wm_1m, wm_1h = await _watermarks(session)
    src, params = _blocks_sql(plan(r.start, r.end, wm_1m, wm_1h), function_param="fid")
    s = (
        await session.execute(
            text(f"SELECT coalesce(sum(count), 0) FROM ({src}) AS b"), {**params, "h": host_id, "fid": function_id}
        )
    ).scalar_one()
    return float(s) / r.seconds


async def function_samples(session: AsyncSession, host_id: str, function_id: int, spec: RangeSpec) -> dict[str, Any]:
    """Samples per basic block of one function in the range."""
    r = await resolve(session, host_id, spec)
    blocks = []
    total = 0
    if r is not None:
        wm_1m, wm_1h = await _watermarks(session)
        src, params = _blocks_sql(plan(r.start, r.end, wm_1m, wm_1h), function_param="fid")
        rows = await session.execute(
            text(f"""
            SELECT block_offset, sum(count) AS s FROM ({src}) AS b GROUP BY block_offset ORDER BY block_offset"""),
            {**params, "h": host_id, "fid": function_id},
        )
        for row in rows:
            total += int(row.s)
            blocks.append(
                {"offset": row.block_offset, "samples": int(row.s), "samples_per_sec": float(row.s) / r.seconds}
            )
    out = r or empty_range(spec)
    return {
        **out.public(),
        "function_id": function_id,
        "window_s": spec.window_s or round(out.seconds),
        "total": total,
        "blocks": blocks,
    }


async def instruction_samples(session: AsyncSession, host_id: str, function_id: int, spec: RangeSpec) -> dict[str, Any]:
    """Samples per instruction of one function in the range (offsets from the function start), like perf
    annotate; `counted` of `total` samples have a known instruction (older agents counted blocks only).
    Read from the raw intervals only (rollups keep blocks, not instructions), so a range older than the
    raw retention has none."""
    r = await resolve(session, host_id, spec)
    items, total, counted = [], 0, 0
    if r is not None:
        params = {"h": host_id, "fid": function_id, "s": r.start, "e": r.end}
        total = int(
            (
                await session.execute(
                    text("""
            SELECT coalesce(sum(u.c), 0)
            FROM sample_intervals s, unnest(s.function_ids, s.counts) AS u(f, c)
            WHERE s.host_id = :h AND s.ts >= :s AND s.ts < :e AND u.f = :fid"""),
                    params,
                )
            ).scalar_one()
        )
        rows = await session.execute(
            text("""
            SELECT s.block_offsets[v.i] + v.o AS off, sum(v.c) AS n
            FROM sample_intervals s, unnest(s.insn_index, s.insn_offsets, s.insn_counts) AS v(i, o, c)
            WHERE s.host_id = :h AND s.ts >= :s AND s.ts < :e AND s.function_ids[v.i] = :fid
              AND :fid = ANY(s.function_ids)
            GROUP BY 1 ORDER BY 1"""),
            params,
        )
        for row in rows:
            counted += int(row.n)
            items.append({"offset": int(row.off), "samples": int(row.n), "samples_per_sec": int(row.n) / r.seconds})
    out = r or empty_range(spec)
    return {**out.public(), "function_id": function_id, "total": total, "counted": counted, "items": items}


def timeline_step(seconds: float, points: int) -> int:
    """The smallest round bucket length that cuts `seconds` into at most `points` buckets."""
    need = seconds / max(1, points)
    for step in NICE_STEPS_S:
        if step >= need:
            return step
    return int(math.ceil(need / 86400) * 86400)


async def timeline(session: AsyncSession, host_id: str, spec: RangeSpec, points: int) -> dict[str, Any]:
    """The host's samples over time in buckets: all, user, idle, outside known functions."""
    r = await resolve(session, host_id, spec) or empty_range(spec)
    step = timeline_step(r.seconds, points)
    origin = datetime(2000, 1, 1, tzinfo=UTC)
    wm_1m, wm_1h = await _watermarks(session)
    src, params = _totals_sql(plan(r.start, r.end, wm_1m, wm_1h, grain=timedelta(seconds=step)))
    rows = await session.execute(
        text(f"""
        SELECT date_bin(:step, t, :origin) AS b, sum(total_samples) AS total, sum(user_samples) AS "user",
               sum(unmapped_samples) AS unmapped, sum(ms) AS ms, sum(idle_samples) AS idle
        FROM ({src}) AS t GROUP BY b ORDER BY b"""),
        {**params, "h": host_id, "step": timedelta(seconds=step), "origin": origin},
    )
    out = []
    for row in rows:
        total, user = int(row.total), int(row.user)
        out.append(
            {
                "t": row.b,
                "seconds": int(row.ms) / 1000.0,
                "total": total,
                "user": user,
                "kernel": total - user,
                "idle": int(row.idle),
                "unmapped": int(row.unmapped),
            }
        )
    return {**r.public(), "step_s": step, "points": out}


async def compare(
    session: AsyncSession, host_a: str, a: TimeRange, host_b: str, b: TimeRange, limit: int, include_idle: bool = False
) -> dict[str, Any]:
    """Per-function samples per second in two ranges (of one host or two), matched by module and name,
    largest change first."""
    sums_a = await totals(session, host_a, a)
    sums_b = await totals(session, host_b, b)
    wm_1m, wm_1h = await _watermarks(session)
    src_a, params_a = _blocks_sql(plan(a.start, a.end, wm_1m, wm_1h), host_param="ha", prefix="a")
    src_b, params_b = _blocks_sql(plan(b.start, b.end, wm_1m, wm_1h), host_param="hb", prefix="b")
    rows = await session.execute(
        text(f"""
        WITH ha AS (SELECT function_id, sum(count) - CASE WHEN :include_idle THEN 0 ELSE sum(idle_count) END AS s,
                           sum(idle_count) AS idle_s, sum(count) AS all_s FROM ({src_a}) AS x GROUP BY function_id),
             hb AS (SELECT function_id, sum(count) - CASE WHEN :include_idle THEN 0 ELSE sum(idle_count) END AS s,
                           sum(idle_count) AS idle_s, sum(count) AS all_s FROM ({src_b}) AS y GROUP BY function_id),
             na AS (SELECT f.name, coalesce(hm.name, '') AS module, sum(ha.s) AS s, min(f.id) AS fid,
                           sum(coalesce(ha.idle_s, 0)) AS idle_s, sum(ha.all_s) AS all_s
                    FROM ha JOIN functions f ON f.id = ha.function_id
                    LEFT JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :ha AND hm.target_id = 'kernel'
                    WHERE ha.s > 0 GROUP BY f.name, hm.name),
             nb AS (SELECT f.name, coalesce(hm.name, '') AS module, sum(hb.s) AS s, min(f.id) AS fid,
                           sum(coalesce(hb.idle_s, 0)) AS idle_s, sum(hb.all_s) AS all_s
                    FROM hb JOIN functions f ON f.id = hb.function_id
                    LEFT JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :hb AND hm.target_id = 'kernel'
                    WHERE hb.s > 0 GROUP BY f.name, hm.name)
        SELECT coalesce(na.name, nb.name) AS name, coalesce(na.module, nb.module) AS module,
               coalesce(na.s, 0) AS a_s, coalesce(nb.s, 0) AS b_s, na.fid AS a_fid, nb.fid AS b_fid,
               (coalesce(na.idle_s, 0) + coalesce(nb.idle_s, 0)) * 2 > coalesce(na.all_s, 0) + coalesce(nb.all_s, 0)
                 AS idle, count(*) OVER () AS n
        FROM na FULL JOIN nb ON na.name = nb.name AND na.module = nb.module
        ORDER BY abs(coalesce(nb.s, 0) / :bsec - coalesce(na.s, 0) / :asec) DESC, 1
        LIMIT :limit"""),
        {
            **params_a,
            **params_b,
            "ha": host_a,
            "hb": host_b,
            "asec": a.seconds,
            "bsec": b.seconds,
            "include_idle": include_idle,
            "limit": limit,
        },
    )
    ta, tb = sums_a["total_samples"], sums_b["total_samples"]
    items, n = [], 0
    for row in rows:
        n = int(row.n)
        sa, sb = int(row.a_s), int(row.b_s)
        ra, rb = sa / a.seconds, sb / b.seconds
        items.append(
            {
                "name": row.name,
                "module": row.module,
                "idle": bool(row.idle),
                "a_function_id": row.a_fid,
                "b_function_id": row.b_fid,
                "a_samples": sa,
                "b_samples": sb,
                "a_per_sec": ra,
                "b_per_sec": rb,
                "delta_per_sec": rb - ra,
                "a_share": sa / ta if ta else 0.0,
                "b_share": sb / tb if tb else 0.0,
            }
        )
    return {
        "a": {"host_id": host_a, **a.public(), **sums_a},
        "b": {"host_id": host_b, **b.public(), **sums_b},
        "functions": n,
        "items": items,
    }


# Reading measurements ----------------------------------------------------------------------------


def _points_sql(spans: list[tuple[str, datetime, datetime]], resources: list[int] | None) -> tuple[str, dict[str, Any]]:
    """A SELECT of (resource, t, seconds, <SLOTS>) over the spans for measurement :m; resource -1 rows
    carry the measured seconds (and the intervals, in `count`). `resources` limits the rows (the
    coverage rows always come)."""
    slots = ", ".join(SLOTS)
    parts: list[str] = []
    params: dict[str, Any] = {}
    if resources is not None:
        params["res"] = resources
    for i, (src, lo, hi) in enumerate(spans):
        a, b = f"plo{i}", f"phi{i}"
        params[a], params[b] = lo, hi
        if src == "raw":
            vals = ", ".join(f"p.vals[(r.i - 1) * {NSLOTS} + {k + 1}] AS {name}" for k, name in enumerate(SLOTS))
            only = " AND r.res = ANY(:res)" if resources is not None else ""
            parts.append(f"""SELECT r.res AS resource, p.ts AS t, p.seconds, {vals}
                FROM measurement_points p, unnest(p.resources) WITH ORDINALITY AS r(res, i)
                WHERE p.measurement_id = :m AND p.ts >= :{a} AND p.ts < :{b}{only}""")
            cover = ", ".join(["1::float8 AS count"] + [f"NULL::float8 AS {n}" for n in SLOTS[1:]])
            parts.append(f"""SELECT {COVERAGE_RESOURCE} AS resource, p.ts AS t, p.seconds, {cover}
                FROM measurement_points p WHERE p.measurement_id = :m AND p.ts >= :{a} AND p.ts < :{b}""")
        else:
            only = f" AND (resource = ANY(:res) OR resource = {COVERAGE_RESOURCE})" if resources is not None else ""
            parts.append(f"""SELECT resource, bucket AS t, seconds, {slots} FROM measurement_points_{src}
                WHERE measurement_id = :m AND bucket >= :{a} AND bucket < :{b}{only}""")
    if not parts:
        none = ", ".join(f"NULL::float8 AS {n}" for n in SLOTS)
        return f"SELECT 0 AS resource, NULL::timestamptz AS t, 0::float8 AS seconds, {none} WHERE false", params
    return " UNION ALL ".join(parts), params


async def measurement_range(session: AsyncSession, measurement_id: str, spec: RangeSpec) -> TimeRange | None:
    """The absolute range a spec means for a measurement: `window_s` back from its newest interval."""
    if (absolute := _absolute(spec)) is not None:
        return absolute
    row = (
        await session.execute(
            text("""
        SELECT ts, seconds FROM measurement_points WHERE measurement_id = :m ORDER BY ts DESC LIMIT 1"""),
            {"m": measurement_id},
        )
    ).first()
    if row is None:
        return None
    return _window_to(spec, row.ts + timedelta(seconds=row.seconds))


def _slot_dict(row: Row[Any]) -> dict[str, float | None]:
    m = row._mapping  # by key: Row.count is a method
    return {name: (float(m[name]) if m[name] is not None else None) for name in SLOTS}


async def measurement_values(session: AsyncSession, measurement_id: str, r: TimeRange) -> dict[str, Any]:
    """Per resource, the sums of its values over the range, and the measured seconds and intervals of
    the range; plus the newest interval's values (the live table's "now" column)."""
    wm_1m, wm_1h = await _watermarks(session)
    src, params = _points_sql(plan(r.start, r.end, wm_1m, wm_1h), None)
    sums = ", ".join(f"sum({n}) AS {n}" for n in SLOTS)
    rows = await session.execute(
        text(f"""
        SELECT resource, sum(seconds) AS seconds, {sums} FROM ({src}) AS p GROUP BY resource ORDER BY resource"""),
        {**params, "m": measurement_id},
    )
    seconds, intervals, per = 0.0, 0, []
    for row in rows:
        if row.resource == COVERAGE_RESOURCE:
            seconds, intervals = float(row.seconds or 0), int(row._mapping["count"] or 0)
        else:
            per.append({"resource": int(row.resource), "values": _slot_dict(row)})
    last = (
        await session.execute(
            text("""
        SELECT ts, seconds, state, resources, vals FROM measurement_points
        WHERE measurement_id = :m ORDER BY ts DESC LIMIT 1"""),
            {"m": measurement_id},
        )
    ).first()
    latest = None
    if last is not None:
        values = []
        for i, res in enumerate(last.resources):
            chunk = last.vals[i * NSLOTS : (i + 1) * NSLOTS]
            values.append(
                {
                    "resource": int(res),
                    "values": {n: (float(v) if v is not None else None) for n, v in zip(SLOTS, chunk, strict=False)},
                }
            )
        latest = {"start": last.ts, "seconds": float(last.seconds), "resources": values}
    return {**r.public(), "measured_seconds": seconds, "intervals": intervals, "resources": per, "latest": latest}


async def measurement_sums(
    session: AsyncSession, windows: Sequence[tuple[str, TimeRange]], resource: int
) -> list[dict[str, Any]]:
    """For each (measurement id, range): the measured seconds of the range and one resource's sums over it
    (None without rows), as measurement_values gives them, for any number of measurements in one statement:
    each tier's spans (raw, minute, hour rollups; `plan`'s) of every range are an array joined with that
    tier's rows, so the statement has a part per tier, not per measurement."""
    if not windows:
        return []
    wm_1m, wm_1h = await _watermarks(session)
    spans: dict[str, tuple[list[int], list[str], list[datetime], list[datetime]]] = {}
    for k, (mid, r) in enumerate(windows):
        for src, lo, hi in plan(r.start, r.end, wm_1m, wm_1h):
            w, m, a, b = spans.setdefault(src, ([], [], [], []))
            w.append(k)
            m.append(mid)
            a.append(lo)
            b.append(hi)
    parts: list[str] = []
    params: dict[str, Any] = {"res": resource}
    slots = ", ".join(f"p.{n}" for n in SLOTS)
    for src, (w, m, a, b) in spans.items():
        params.update({f"w_{src}": w, f"m_{src}": m, f"lo_{src}": a, f"hi_{src}": b})
        s = (
            f"unnest(CAST(:w_{src} AS int[]), CAST(:m_{src} AS text[]), CAST(:lo_{src} AS timestamptz[]), "
            f"CAST(:hi_{src} AS timestamptz[])) AS s(w, mid, lo, hi)"
        )
        if src == "raw":
            joined = f"{s} JOIN measurement_points p ON p.measurement_id = s.mid AND p.ts >= s.lo AND p.ts < s.hi"
            vals = ", ".join(f"p.vals[(r.i - 1) * {NSLOTS} + {k + 1}] AS {name}" for k, name in enumerate(SLOTS))
            parts.append(f"""SELECT s.w, r.res AS resource, p.seconds, {vals}
                FROM {joined} CROSS JOIN LATERAL unnest(p.resources) WITH ORDINALITY AS r(res, i) WHERE r.res = :res""")
            cover = ", ".join(["1::float8 AS count"] + [f"NULL::float8 AS {n}" for n in SLOTS[1:]])
            parts.append(f"SELECT s.w, {COVERAGE_RESOURCE} AS resource, p.seconds, {cover} FROM {joined}")
        else:
            parts.append(f"""SELECT s.w, p.resource, p.seconds, {slots}
                FROM {s} JOIN measurement_points_{src} p
                  ON p.measurement_id = s.mid AND p.bucket >= s.lo AND p.bucket < s.hi
                WHERE p.resource = :res OR p.resource = {COVERAGE_RESOURCE}""")
    out: list[dict[str, Any]] = [{"measured_seconds": 0.0, "values": None} for _ in windows]
    if not parts:
        return out
    sums = ", ".join(f"sum({n}) AS {n}" for n in SLOTS)
    rows = await session.execute(
        text(f"""
        SELECT w, resource, sum(seconds) AS seconds, {sums} FROM ({" UNION ALL ".join(parts)}) AS p
        GROUP BY w, resource"""),
        params,
    )
    for row in rows:
        if row.resource == COVERAGE_RESOURCE:
            out[row.w]["measured_seconds"] = float(row.seconds or 0)
        elif row.resource == resource:
            out[row.w]["values"] = _slot_dict(row)
    return out


async def measurement_series(
    session: AsyncSession, measurement_id: str, r: TimeRange, resources: list[int], points: int
) -> dict[str, Any]:
    """Per resource, its values summed per round bucket of the range (at most `points` buckets), with
    each bucket's measured seconds (the divisor of rates and concurrency)."""
    step = timeline_step(r.seconds, points)
    wm_1m, wm_1h = await _watermarks(session)
    src, params = _points_sql(plan(r.start, r.end, wm_1m, wm_1h, grain=timedelta(seconds=step)), resources)
    sums = ", ".join(f"sum({n}) AS {n}" for n in SLOTS)
    rows = await session.execute(
        text(f"""
        SELECT resource, date_bin(:step, t, :origin) AS b, sum(seconds) AS seconds, {sums}
        FROM ({src}) AS p GROUP BY resource, b ORDER BY resource, b"""),
        {**params, "m": measurement_id, "step": timedelta(seconds=step), "origin": datetime(2000, 1, 1, tzinfo=UTC)},
    )
    buckets: dict[datetime, float] = {}
    series: dict[int, list[dict[str, Any]]] = {res: [] for res in resources}
    for row in rows:
        if row.resource == COVERAGE_RESOURCE:
            buckets[row.b] = float(row.seconds or 0)
        elif row.resource in series:
            series[row.resource].append({"t": row.b, "values": _slot_dict(row)})
    return {
        **r.public(),
        "step_s": step,
        "buckets": [{"t": t, "seconds": s} for t, s in sorted(buckets.items())],
        "series": [{"resource": res, "points": pts} for res, pts in series.items()],
    }


async def newest_block_edges(
    session: AsyncSession, host_id: str, target_id: str, keys: list[tuple[str, int]] | None
) -> dict[tuple[str, int], dict[str, Any]]:
    """Per catalog function (digest, index) of the target — those in `keys`, or every one when None —
    measured with its blocks counted exactly and with edges stored: the newest such measurement's id and
    its edges' counts summed over its raw intervals, as (from offset, to offset, kind, weakest label,
    count) with the stored EdgeKind and EdgeLabel numbers (-1: no block on that side)."""
    only = ""
    params: dict[str, Any] = {"h": host_id, "t": target_id}
    if keys is not None:
        if not keys:
            return {}
        only = (
            "JOIN unnest(CAST(:kd AS text[]), CAST(:ki AS int[])) AS q(d, i) "
            "ON q.d = mr.digest AND q.i = mr.function_index"
        )
        params["kd"], params["ki"] = [k[0] for k in keys], [k[1] for k in keys]
    rows = await session.execute(
        text(f"""
        WITH fr AS (
            SELECT DISTINCT ON (mr.digest, mr.function_index) m.id AS mid, mr.idx AS row, mr.digest,
                   mr.function_index
            FROM measurements m JOIN measurement_resources mr ON mr.measurement_id = m.id
            {only}
            WHERE m.host_id = :h AND m.target_id = :t AND mr.kind = 'function'
              AND EXISTS (SELECT 1 FROM measurement_resources b
                          WHERE b.measurement_id = m.id AND b.kind = 'block' AND b.function_row = mr.idx
                            AND b.metrics -> 'count' ->> 'label' = 'exact')
              AND EXISTS (SELECT 1 FROM measurement_points p
                          WHERE p.measurement_id = m.id AND mr.idx = ANY(p.edge_rows))
            ORDER BY mr.digest, mr.function_index, m.created_at DESC, m.id)
        SELECT fr.digest, fr.function_index, fr.mid, e.f AS src, e.t AS dst, e.k AS kind, max(e.l) AS label,
               sum(e.c) AS n
        FROM fr JOIN measurement_points p ON p.measurement_id = fr.mid,
             unnest(p.edge_rows, p.edge_from, p.edge_to, p.edge_kinds, p.edge_labels, p.edge_counts)
               AS e(r, f, t, k, l, c)
        WHERE e.r = fr.row
        GROUP BY fr.digest, fr.function_index, fr.mid, e.f, e.t, e.k"""),
        params,
    )
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        entry = out.setdefault((row.digest, int(row.function_index)), {"measurement_id": row.mid, "edges": []})
        entry["edges"].append((int(row.src), int(row.dst), int(row.kind), int(row.label), int(row.n)))
    return out
