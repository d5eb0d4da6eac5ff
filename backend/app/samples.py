# SPDX-License-Identifier: Apache-2.0
"""The sample time series: the only module that reads or writes `block_samples` and `interval_totals`.

Writing: one metric batch per agent interval (bulk COPY) with its delivery mark and the gaps it records,
in one transaction, and deletion of samples, gaps and audit records past retention. Reading: every
question the console asks of the series, each over a `TimeRange` — top functions, per-function and
per-block counts, hotness, the host's samples over time, two ranges compared. Routes never touch the
tables themselves, so moving the series onto time-partitioned tables with rollups (or another engine)
changes this module only, not the routes' contracts.

A range is either the last `window_s` seconds of the host's own samples (measured against the newest
interval the host reported, never against this server's clock, so a host whose clock differs still shows
its data) or an absolute [from, to) interval; an interval belongs to a range when its start does.
Rates are samples per second of the range's length.

Idle: a CPU with nothing to run runs the kernel's idle task (pid 0), and a whole-system sampler sees
it there. Agents tell each sample's context, so idle samples are exact: `block_samples.idle` and
`interval_totals.idle_samples` (an interrupt handled while idle counts as idle too). For batches from
agents that do not report context, the samples in the kernel's idle-loop functions (`IDLE_FUNCTION_RE`)
are marked idle when they are stored. Idle samples are counted apart and left out of rankings unless
asked for, because they are not work.

Samples for a module whose catalog piece is not yet stored cannot be mapped to a function id; they are
dropped and counted (interval_totals.dropped_samples, and the agent session's counter), because an
interval's hotness is only useful while it is recent and the catalog arrives within seconds.
"""
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app import stacks as stack_store

# The kernel's idle loop on x86-64: the functions a sampled CPU is in when it has nothing to run
# (halted, polling or in a cpuidle driver). Matched against whole names.
IDLE_FUNCTION_RE = (r"^(pv_native_safe_halt|native_safe_halt|native_halt|default_idle|default_idle_call|"
                    r"arch_cpu_idle|cpu_idle_poll|do_idle|poll_idle|acpi_safe_halt|acpi_idle_.*|intel_idle.*|"
                    r"mwait_idle.*|amd_e400_idle|cpuidle_enter.*|xen_safe_halt|hlt_play_dead)$")

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


async def resolve(session: AsyncSession, host_id: str, spec: RangeSpec) -> TimeRange | None:
    """The absolute range a spec means for this host; None for a window on a host with no samples."""
    if spec.start is not None and spec.end is not None:
        return TimeRange(spec.start, spec.end)
    row = (await session.execute(text("""
        SELECT ts, interval_ms FROM interval_totals WHERE host_id = :h ORDER BY ts DESC LIMIT 1"""),
        {"h": host_id})).first()
    if row is None:
        return None
    end = row.ts + timedelta(milliseconds=row.interval_ms)
    return TimeRange(end - timedelta(seconds=spec.window_s or 10), end)


def _empty_range(spec: RangeSpec) -> TimeRange:
    """A range for a host without samples, so responses still say what they cover."""
    if spec.start is not None and spec.end is not None:
        return TimeRange(spec.start, spec.end)
    end = datetime.now(UTC)
    return TimeRange(end - timedelta(seconds=spec.window_s or 10), end)


# Coverage and gaps -------------------------------------------------------------------------------

async def coverage(session: AsyncSession, host_id: str, window_s: int, buckets: int) -> dict[str, Any]:
    """Coverage of the last `window_s` seconds (by our clock) in `buckets` buckets, and the recorded gaps."""
    bucket_s = max(1, window_s // buckets)
    end = (await session.execute(text("SELECT now()"))).scalar_one()
    start = end - timedelta(seconds=bucket_s * buckets)
    rows = await session.execute(text("""
        SELECT floor(extract(epoch FROM (ts - :start)) / :b)::int AS i, sum(interval_ms)::bigint AS ms
        FROM interval_totals WHERE host_id = :h AND ts >= :start AND ts < :end GROUP BY 1"""),
        {"h": host_id, "start": start, "end": end, "b": bucket_s})
    covered = {r.i: int(r.ms) for r in rows}
    gaps = await session.execute(text("""
        SELECT id, start_ts, end_ts, messages, reason, source FROM data_gaps
        WHERE host_id = :h AND end_ts >= :start ORDER BY start_ts LIMIT 500"""), {"h": host_id, "start": start})
    return {"start": start, "end": end, "bucket_s": bucket_s,
            "buckets": [{"start": start + timedelta(seconds=i * bucket_s),
                         "covered_ms": min(covered.get(i, 0), bucket_s * 1000)} for i in range(buckets)],
            "gaps": [{"id": g.id, "start": g.start_ts, "end": g.end_ts, "messages": g.messages, "reason": g.reason,
                      "source": g.source} for g in gaps]}


async def delete_host_series(session: AsyncSession, host_id: str) -> None:
    """Delete a host's samples, interval totals and stacks (its gaps go with its host row)."""
    for table in ("block_samples", "interval_totals"):
        await session.execute(text(f"DELETE FROM {table} WHERE host_id = :h"), {"h": host_id})
    await stack_store.delete_host(session, host_id)


# Writing ------------------------------------------------------------------------------------------

async def store_batch(engine: AsyncEngine, host_id: str, ts: datetime | None, interval_ms: int,
                      rows: list[tuple], totals: dict[str, Any] | None, *,
                      stacks: "stack_store.BatchStacks | None" = None,
                      mark: tuple[str, int] | None = None, gaps: list[dict] | None = None, refused: bool = False,
                      clock_offset_ms: int | None = None) -> None:
    """Store one data message in one transaction: its sample rows (function_id, block_offset, count, idle,
    instruction offsets, instruction counts) and totals (total, user, unmapped, lost, dropped, idle,
    idle_by_context, stack_samples, stack_dropped) when ts is given, its call stacks (app.stacks), the
    gaps it records, and the delivery mark (instance id, seq) that makes a resend of it a no-op. A refused
    batch stores only its gap, the mark and, when known, the host's clock offset."""
    async with engine.begin() as conn:
        if ts is not None and totals is not None:
            if rows:
                raw = await conn.get_raw_connection()
                assert raw.driver_connection is not None
                copy_sql = ("COPY block_samples (host_id, ts, function_id, block_offset, count, idle, insn_offsets, "
                            "insn_counts) FROM STDIN")
                async with raw.driver_connection.cursor() as cur, cur.copy(copy_sql) as copy:
                    for fid, off, count, idle, insn_offsets, insn_counts in rows:
                        await copy.write_row((host_id, ts, fid, off, count, idle, insn_offsets, insn_counts))
            await conn.execute(text("""
                INSERT INTO interval_totals (host_id, ts, interval_ms, total_samples, user_samples,
                                             unmapped_samples, lost_samples, dropped_samples, idle_samples,
                                             idle_by_context, stack_samples, stack_dropped_samples)
                VALUES (:h, :ts, :ms, :t, :u, :un, :l, :d, :i, :ic, :ss, :sd)
                ON CONFLICT (host_id, ts) DO UPDATE SET
                  total_samples = interval_totals.total_samples + excluded.total_samples,
                  user_samples = interval_totals.user_samples + excluded.user_samples,
                  unmapped_samples = interval_totals.unmapped_samples + excluded.unmapped_samples,
                  lost_samples = interval_totals.lost_samples + excluded.lost_samples,
                  dropped_samples = interval_totals.dropped_samples + excluded.dropped_samples,
                  idle_samples = interval_totals.idle_samples + excluded.idle_samples,
                  idle_by_context = interval_totals.idle_by_context OR excluded.idle_by_context,
                  stack_samples = interval_totals.stack_samples + excluded.stack_samples,
                  stack_dropped_samples = interval_totals.stack_dropped_samples + excluded.stack_dropped_samples"""),
                {"h": host_id, "ts": ts, "ms": interval_ms or 1000, "t": totals["total"], "u": totals["user"],
                 "un": totals["unmapped"], "l": totals["lost"], "d": totals["dropped"], "i": totals["idle"],
                 "ic": totals["idle_by_context"], "ss": totals["stack_samples"], "sd": totals["stack_dropped"]})
            if stacks is not None:
                await stack_store.write(conn, host_id, ts, stacks)
        for g in gaps or ():
            await conn.execute(text("""
                INSERT INTO data_gaps (host_id, start_ts, end_ts, instance_id, first_seq, messages, reason, source)
                VALUES (:h, :s, :e, :i, :f, :m, :r, :src)"""),
                {"h": host_id, "s": g["start"], "e": g["end"], "i": g["instance"], "f": g["first_seq"],
                 "m": g["messages"], "r": g["reason"][:1024], "src": g["source"]})
        if mark is not None:
            await conn.execute(text("""
                INSERT INTO delivery_marks (host_id, instance_id, seq, updated_at) VALUES (:h, :i, :s, now())
                ON CONFLICT (host_id, instance_id) DO UPDATE SET seq = greatest(delivery_marks.seq, excluded.seq),
                  updated_at = now()"""), {"h": host_id, "i": mark[0], "s": mark[1]})
        if refused:
            await conn.execute(text("""
                UPDATE hosts SET refused_batches = refused_batches + 1, last_seen = now(),
                  clock_offset_ms = coalesce(:o, clock_offset_ms),
                  clock_checked_at = CASE WHEN :o IS NULL THEN clock_checked_at ELSE now() END
                WHERE id = :h"""), {"h": host_id, "o": clock_offset_ms})
        else:
            await conn.execute(text("UPDATE hosts SET last_seen = now() WHERE id = :h"), {"h": host_id})


async def prune_samples(engine: AsyncEngine, retention_hours: float, now: datetime | None = None,
                        audit_retention_days: float | None = None, stack_retention_hours: float | None = None) -> int:
    """Delete samples, interval totals, stacks and gaps older than the retention, and rows stamped in the
    future beyond it (a clock that jumped before validation existed); audit records older than
    `audit_retention_days` when given. Returns the sample rows deleted."""
    now = now or datetime.now(UTC)
    cutoff = now - timedelta(hours=retention_hours)
    future = now + timedelta(hours=1)
    async with engine.begin() as conn:
        deleted = (await conn.execute(text("DELETE FROM block_samples WHERE ts < :c OR ts > :f"),
                                      {"c": cutoff, "f": future})).rowcount
        await conn.execute(text("DELETE FROM interval_totals WHERE ts < :c OR ts > :f"), {"c": cutoff, "f": future})
        stack_cutoff = now - timedelta(hours=min(retention_hours, stack_retention_hours or retention_hours))
        await stack_store.prune(conn, stack_cutoff, future)
        await conn.execute(text("DELETE FROM data_gaps WHERE end_ts < :c"), {"c": cutoff})
        await conn.execute(text("DELETE FROM delivery_marks WHERE updated_at < :c"),
                           {"c": now - timedelta(hours=max(retention_hours, 24) * 2)})
        if audit_retention_days is not None:
            await conn.execute(text("DELETE FROM audit_log WHERE at < :c"),
                               {"c": now - timedelta(days=audit_retention_days)})
    return deleted


async def function_names(engine: AsyncEngine, ids: list[int]) -> dict[int, str]:
    if not ids:
        return {}
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT id, name FROM functions WHERE id = ANY(:ids)"), {"ids": ids})
        return {r[0]: r[1] for r in rows}


# Reading ------------------------------------------------------------------------------------------

def function_totals_sql(r: TimeRange | None) -> tuple[str, dict[str, Any]]:
    """A SELECT of (function_id, s) — samples per function in the range — for other queries to join."""
    if r is None:
        return "SELECT NULL::bigint AS function_id, 0::numeric AS s WHERE false", {}
    return ("SELECT function_id, sum(count) AS s FROM block_samples "
            "WHERE host_id = :h AND ts >= :r_start AND ts < :r_end GROUP BY function_id",
            {"r_start": r.start, "r_end": r.end})


async def totals(session: AsyncSession, host_id: str, r: TimeRange) -> dict[str, int]:
    """Whole-host totals of a range: all samples, user, kernel (all − user), idle (the idle task's),
    outside known functions, lost; and how many samples carried a call stack."""
    row = (await session.execute(text("""
        SELECT coalesce(sum(total_samples), 0) AS total, coalesce(sum(user_samples), 0) AS "user",
               coalesce(sum(unmapped_samples), 0) AS unmapped, coalesce(sum(lost_samples), 0) AS lost,
               coalesce(sum(idle_samples), 0) AS idle, coalesce(sum(stack_samples), 0) AS stacks
        FROM interval_totals WHERE host_id = :h AND ts >= :s AND ts < :e"""),
        {"h": host_id, "s": r.start, "e": r.end})).one()
    total, user = int(row.total), int(row.user)
    return {"total_samples": total, "user_samples": user, "kernel_samples": total - user,
            "idle_samples": int(row.idle), "unmapped_samples": int(row.unmapped), "lost_samples": int(row.lost),
            "stack_samples": int(row.stacks)}


async def idle_function_indexes(conn, digest: str) -> set[int]:
    """Indexes of a catalog piece's idle-loop functions, for batches from agents without context."""
    rows = await conn.execute(text("SELECT index FROM functions WHERE digest = :d AND name ~ :idle"),
                              {"d": digest, "idle": IDLE_FUNCTION_RE})
    return {r[0] for r in rows}


def function_work_sql(r: TimeRange, include_idle: bool) -> tuple[str, dict[str, Any]]:
    """A SELECT of (function_id, s, idle_s): samples per function in the range (the idle task's left
    out unless include_idle) and, of all its samples, the idle task's."""
    return ("SELECT function_id, sum(count) FILTER (WHERE :include_idle OR NOT idle) AS s, "
            "sum(count) FILTER (WHERE idle) AS idle_s, sum(count) AS all_s FROM block_samples "
            "WHERE host_id = :h AND ts >= :r_start AND ts < :r_end GROUP BY function_id",
            {"r_start": r.start, "r_end": r.end, "include_idle": include_idle})


_TOP_SORTS = {
    "samples": "hot.s {dir}, f.name, f.id",
    "name": "f.name {dir}, f.id",
    "module": "module {dir}, hot.s DESC, f.name",
}


async def top_functions(session: AsyncSession, host_id: str, spec: RangeSpec, limit: int, offset: int = 0,
                        sort: str = "samples", descending: bool = True, include_idle: bool = False) -> dict[str, Any]:
    """Functions by self samples in the range (or by inclusive samples, from call stacks); share is of
    all samples of the host (kernel and user). inclusive_samples is null when the range has no stacks."""
    r = await resolve(session, host_id, spec)
    if r is None:
        out = _empty_range(spec)
        return {**out.public(), "window_s": spec.window_s or round(out.seconds), "total_samples": 0,
                "user_samples": 0, "kernel_samples": 0, "idle_samples": 0, "unmapped_samples": 0, "lost_samples": 0,
                "stack_samples": 0, "functions": 0, "items": []}
    sums = await totals(session, host_id, r)
    inclusive: dict[int, int] | None = None
    if sums["stack_samples"] > 0:
        inclusive, _, _ = await stack_store.inclusive_by_function(session, host_id, r.start, r.end, include_idle)
    by_inclusive = sort == "inclusive" and inclusive is not None
    hot_sql, params = function_work_sql(r, include_idle)
    order = _TOP_SORTS["samples" if sort == "inclusive" else sort].format(dir="DESC" if descending else "ASC")
    page = "" if by_inclusive else "LIMIT :limit OFFSET :offset"
    rows = (await session.execute(text(f"""
        WITH hot AS ({hot_sql})
        SELECT hot.function_id, hot.s, f.name, coalesce(hm.name, '') AS module,
               coalesce(hot.idle_s, 0) * 2 > hot.all_s AS idle,
               CASE WHEN hm.base_address + f."offset" < 0
                    THEN (hm.base_address + f."offset")::numeric + 18446744073709551616
                    ELSE (hm.base_address + f."offset")::numeric END AS address,
               to_hex(hm.base_address + f."offset") AS address_hex,
               count(*) OVER () AS n
        FROM hot JOIN functions f ON f.id = hot.function_id
        LEFT JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :h
        WHERE hot.s > 0
        ORDER BY {order} {page}"""),
        {**params, "h": host_id, "limit": limit, "offset": offset})).all()
    total = sums["total_samples"]
    items = []
    for row in rows:
        s = int(row.s)
        items.append({"function_id": row.function_id, "name": row.name, "module": row.module,
                      "address": int(row.address) if row.address is not None else None,
                      "address_hex": row.address_hex, "samples": s, "samples_per_sec": s / r.seconds,
                      "share": (s / total) if total else 0.0, "idle": bool(row.idle),
                      "inclusive_samples": (max(inclusive.get(row.function_id, 0), s)
                                            if inclusive is not None else None)})
    if by_inclusive:
        assert inclusive is not None
        # Functions that only call (no self samples) rank by what they include too.
        have = {i["function_id"] for i in items}
        extra = [fid for fid in inclusive if fid not in have]
        for row in (await session.execute(text("""
                SELECT f.id AS function_id, f.name, coalesce(hm.name, '') AS module,
                       CASE WHEN hm.base_address + f."offset" < 0
                            THEN (hm.base_address + f."offset")::numeric + 18446744073709551616
                            ELSE (hm.base_address + f."offset")::numeric END AS address,
                       to_hex(hm.base_address + f."offset") AS address_hex
                FROM functions f LEFT JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :h
                WHERE f.id = ANY(:ids)"""), {"h": host_id, "ids": extra})).all() if extra else []:
            items.append({"function_id": row.function_id, "name": row.name, "module": row.module,
                          "address": int(row.address) if row.address is not None else None,
                          "address_hex": row.address_hex, "samples": 0, "samples_per_sec": 0.0, "share": 0.0,
                          "idle": False, "inclusive_samples": inclusive[row.function_id]})
        items.sort(key=lambda i: (-i["inclusive_samples"] if descending else i["inclusive_samples"], i["name"]))
        n = len(items)
        items = items[offset:offset + limit]
    else:
        n = int(rows[0].n) if rows else await _ranked_count(session, host_id, r, include_idle) if offset else 0
    return {**r.public(), "window_s": spec.window_s or round(r.seconds), **sums, "functions": n, "items": items}


async def _ranked_count(session: AsyncSession, host_id: str, r: TimeRange, include_idle: bool) -> int:
    hot_sql, params = function_work_sql(r, include_idle)
    return (await session.execute(text(f"""
        WITH hot AS ({hot_sql})
        SELECT count(*) FROM hot JOIN functions f ON f.id = hot.function_id WHERE hot.s > 0"""),
        {**params, "h": host_id})).scalar_one()


async def hotness(session: AsyncSession, host_id: str, spec: RangeSpec) -> dict[str, Any]:
    """Samples per second of every function with samples in the range."""
    r = await resolve(session, host_id, spec)
    if r is None:
        out = _empty_range(spec)
        return {**out.public(), "window_s": spec.window_s or round(out.seconds), "items": []}
    hot_sql, params = function_totals_sql(r)
    rows = await session.execute(text(f"{hot_sql} ORDER BY s DESC"), {**params, "h": host_id})
    items = [{"function_id": row.function_id, "samples_per_sec": float(row.s) / r.seconds} for row in rows]
    return {**r.public(), "window_s": spec.window_s or round(r.seconds), "items": items}


async def function_rate(session: AsyncSession, host_id: str, function_id: int, spec: RangeSpec) -> float:
    r = await resolve(session, host_id, spec)
    if r is None:
        return 0.0
    s = (await session.execute(text("""
        SELECT coalesce(sum(count), 0) FROM block_samples
        WHERE host_id = :h AND function_id = :fid AND ts >= :s AND ts < :e"""),
        {"h": host_id, "fid": function_id, "s": r.start, "e": r.end})).scalar_one()
    return float(s) / r.seconds


async def function_samples(session: AsyncSession, host_id: str, function_id: int, spec: RangeSpec) -> dict[str, Any]:
    """Samples per basic block of one function in the range."""
    r = await resolve(session, host_id, spec)
    blocks = []
    total = 0
    if r is not None:
        rows = await session.execute(text("""
            SELECT block_offset, sum(count) AS s FROM block_samples
            WHERE host_id = :h AND function_id = :fid AND ts >= :s AND ts < :e
            GROUP BY block_offset ORDER BY block_offset"""),
            {"h": host_id, "fid": function_id, "s": r.start, "e": r.end})
        for row in rows:
            total += int(row.s)
            blocks.append({"offset": row.block_offset, "samples": int(row.s),
                           "samples_per_sec": float(row.s) / r.seconds})
    out = r or _empty_range(spec)
    return {**out.public(), "function_id": function_id, "window_s": spec.window_s or round(out.seconds),
            "total": total, "blocks": blocks}


async def instruction_samples(session: AsyncSession, host_id: str, function_id: int,
                              spec: RangeSpec) -> dict[str, Any]:
    """Samples per instruction of one function in the range (offsets from the function start), like perf
    annotate; `counted` of `total` samples have a known instruction (older agents counted blocks only)."""
    r = await resolve(session, host_id, spec)
    items, total, counted = [], 0, 0
    if r is not None:
        params = {"h": host_id, "fid": function_id, "s": r.start, "e": r.end}
        total = int((await session.execute(text("""
            SELECT coalesce(sum(count), 0) FROM block_samples
            WHERE host_id = :h AND function_id = :fid AND ts >= :s AND ts < :e"""), params)).scalar_one())
        rows = await session.execute(text("""
            SELECT bs.block_offset + u.o AS off, sum(u.c) AS n
            FROM block_samples bs, unnest(bs.insn_offsets, bs.insn_counts) AS u(o, c)
            WHERE bs.host_id = :h AND bs.function_id = :fid AND bs.ts >= :s AND bs.ts < :e
            GROUP BY 1 ORDER BY 1"""), params)
        for row in rows:
            counted += int(row.n)
            items.append({"offset": int(row.off), "samples": int(row.n), "samples_per_sec": int(row.n) / r.seconds})
    out = r or _empty_range(spec)
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
    r = await resolve(session, host_id, spec) or _empty_range(spec)
    step = timeline_step(r.seconds, points)
    origin = datetime(2000, 1, 1, tzinfo=UTC)
    params = {"h": host_id, "s": r.start, "e": r.end, "step": timedelta(seconds=step), "origin": origin}
    rows = await session.execute(text("""
        SELECT date_bin(:step, ts, :origin) AS b, sum(total_samples) AS total, sum(user_samples) AS "user",
               sum(unmapped_samples) AS unmapped, sum(interval_ms) AS ms, sum(idle_samples) AS idle
        FROM interval_totals WHERE host_id = :h AND ts >= :s AND ts < :e GROUP BY b ORDER BY b"""), params)
    buckets = {row.b: row for row in rows}
    out = []
    for b in sorted(buckets):
        row = buckets[b]
        total, user = int(row.total), int(row.user)
        out.append({"t": b, "seconds": int(row.ms) / 1000.0, "total": total, "user": user, "kernel": total - user,
                    "idle": int(row.idle), "unmapped": int(row.unmapped)})
    return {**r.public(), "step_s": step, "points": out}


async def compare(session: AsyncSession, host_a: str, a: TimeRange, host_b: str, b: TimeRange, limit: int,
                  include_idle: bool = False) -> dict[str, Any]:
    """Per-function samples per second in two ranges (of one host or two), matched by module and name,
    largest change first."""
    sums_a = await totals(session, host_a, a)
    sums_b = await totals(session, host_b, b)
    rows = await session.execute(text("""
        WITH ha AS (SELECT function_id, sum(count) FILTER (WHERE :include_idle OR NOT idle) AS s,
                           sum(count) FILTER (WHERE idle) AS idle_s, sum(count) AS all_s FROM block_samples
                    WHERE host_id = :ha AND ts >= :as AND ts < :ae GROUP BY function_id),
             hb AS (SELECT function_id, sum(count) FILTER (WHERE :include_idle OR NOT idle) AS s,
                           sum(count) FILTER (WHERE idle) AS idle_s, sum(count) AS all_s FROM block_samples
                    WHERE host_id = :hb AND ts >= :bs AND ts < :be GROUP BY function_id),
             na AS (SELECT f.name, coalesce(hm.name, '') AS module, sum(ha.s) AS s, min(f.id) AS fid,
                           sum(coalesce(ha.idle_s, 0)) AS idle_s, sum(ha.all_s) AS all_s
                    FROM ha JOIN functions f ON f.id = ha.function_id
                    LEFT JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :ha
                    WHERE ha.s > 0 GROUP BY f.name, hm.name),
             nb AS (SELECT f.name, coalesce(hm.name, '') AS module, sum(hb.s) AS s, min(f.id) AS fid,
                           sum(coalesce(hb.idle_s, 0)) AS idle_s, sum(hb.all_s) AS all_s
                    FROM hb JOIN functions f ON f.id = hb.function_id
                    LEFT JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :hb
                    WHERE hb.s > 0 GROUP BY f.name, hm.name)
        SELECT coalesce(na.name, nb.name) AS name, coalesce(na.module, nb.module) AS module,
               coalesce(na.s, 0) AS a_s, coalesce(nb.s, 0) AS b_s, na.fid AS a_fid, nb.fid AS b_fid,
               (coalesce(na.idle_s, 0) + coalesce(nb.idle_s, 0)) * 2 > coalesce(na.all_s, 0) + coalesce(nb.all_s, 0)
                 AS idle, count(*) OVER () AS n
        FROM na FULL JOIN nb ON na.name = nb.name AND na.module = nb.module
        ORDER BY abs(coalesce(nb.s, 0) / :bsec - coalesce(na.s, 0) / :asec) DESC, 1
        LIMIT :limit"""),
        {"ha": host_a, "as": a.start, "ae": a.end, "hb": host_b, "bs": b.start, "be": b.end,
         "asec": a.seconds, "bsec": b.seconds, "include_idle": include_idle, "limit": limit})
    ta, tb = sums_a["total_samples"], sums_b["total_samples"]
    items, n = [], 0
    for row in rows:
        n = int(row.n)
        sa, sb = int(row.a_s), int(row.b_s)
        ra, rb = sa / a.seconds, sb / b.seconds
        items.append({"name": row.name, "module": row.module, "idle": bool(row.idle),
                      "a_function_id": row.a_fid, "b_function_id": row.b_fid,
                      "a_samples": sa, "b_samples": sb, "a_per_sec": ra, "b_per_sec": rb, "delta_per_sec": rb - ra,
                      "a_share": sa / ta if ta else 0.0, "b_share": sb / tb if tb else 0.0})
    return {"a": {"host_id": host_a, **a.public(), **sums_a}, "b": {"host_id": host_b, **b.public(), **sums_b},
            "functions": n, "items": items}
