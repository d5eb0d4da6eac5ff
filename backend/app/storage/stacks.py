# SPDX-License-Identifier: Apache-2.0
"""The call-stack series: the only module that reads or writes `stack_defs`, `stack_samples`,
`stack_samples_1m`, `stack_samples_10m` and `stack_blocks` (with the rollup task's statements).

Storage is compact: a stack's frames are stored once per host (`stack_defs`, keyed by the agent's content
id, which app.protocol.stack_defs recomputes), and each interval stores one row per stack with its total and, in
parallel arrays, its counts per (pid, command, CPU) (`stack_samples`, partitioned by hour like the other
raw series and dropped by partition after HOTPATH_STACK_RETENTION_HOURS). Every minute's samples per
(stack, pid, command, CPU) are summed into `stack_samples_1m`, and every ten minutes' (UTC-aligned) into
`stack_samples_10m`, as data arrives: by the rollup task for completed minutes, by the writer for stacks
arriving below the minute watermark (`add_late`), so both rollups equal the raw sums at every commit. Rows are
written by the ingest writer's group commit (`write_many`). Kernel frames are kept as (catalog digest,
function index, offset), so stacks are stored even before their catalog piece is, and resolve to
functions when it is; user frames as (file, offset in the file); other frames as addresses.

Reading: whole ten minutes below the minute watermark are read from the ten-minute rollup, the other
whole minutes from the minute rollup, the range's edges from the raw rows (`_source`), so an hour reads
~6 to 24 rows per stack and context, not every interval's. A flame graph keeps, per process, what each
closed block (whole ten minutes, other whole minutes) adds under a filter, by the block's version in
`stack_blocks` (given with its first minute, renewed by every late batch summed into it: `BlockSums`), so a view
of an hour seen before reads only its raw edges and the blocks changed since; and the merged sums of the
closed part of the last ranges asked (`WindowSums`, also kept by the rollup task for the last hour), so a
range a minute later adds and takes away a block or two at its ends instead of adding up its blocks. Every
question is over a `TimeRange` and a `StackFilter` (process, command, CPU, and the idle
task excluded, included or alone) — a flame graph (the range's distinct paths of frames merged by
function, root first, with their samples, which the console merges into the tree; user frames merged by
file, since without symbols each return address would be a frame of its own; or the same by stack id,
each stack's samples apart from its frames, which the console asks for once and keeps under the host's
`catalog_key`), two flame graphs merged
into one tree for a differential view, a function's callers and callees (and the observed targets
of its indirect call sites), inclusive samples per function, and a pprof profile (which keeps every
address). The differential tree is built in Python from the range's distinct stacks (sorted root first, so each path
adds only the frames it does not share with the one before: `build_tree`); each stack's frames are
resolved once per process (`StackPaths`), so a refreshed view only reads the stacks that are new. A
flame graph reads its stacks and who they belong to (processes, commands, CPUs) in one pass. Routes never
touch the tables, so moving the series elsewhere changes this module only.

A kernel-build group of the fleet (app.storage.fleet) reads its hosts' stacks together (`group_stacks`): the
whole minutes of the range below the minute watermark from the per-host ten-minute and minute rollups in one
statement over all the hosts, summed per stack id by Postgres (a stack id is the content id of its frames, so
hosts of one build share them), never the raw rows; the paths are then merged by function as a host's are.
"""

import gzip
import hashlib
import os
from array import array
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import numpy as np
import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.protocol.stack_defs import BatchStacks
from app.storage import nodes
from app.storage.binary_rows import binary_rows, int8_arrays
from app.storage.models import i64_to_u64, u64_to_i64
from app.storage.series import copytext, rollups

KERNEL_FUNCTION, KERNEL_ADDRESS, USER_FILE, USER_ADDRESS = 1, 2, 3, 4
FRAME_KINDS = {
    KERNEL_FUNCTION: "kernel",
    KERNEL_ADDRESS: "kernel_address",
    USER_FILE: "user",
    USER_ADDRESS: "user_address",
}
IdleMode = Literal["exclude", "include", "only"]
# A tree larger than this is cut: frames below a share of the root's samples are folded into their parent.
MAX_NODES = 150_000


@dataclass(frozen=True)
class StackFilter:
    """Which samples a question is about: one process, one command name, one CPU (None: any), and what
    to do with the idle task's samples."""

    pid: int | None = None
    comm: str | None = None
    cpu: int | None = None
    idle: IdleMode = "exclude"

    def sql(self) -> tuple[str, dict[str, Any]]:
        where = []
        params: dict[str, Any] = {}
        if self.pid is not None:
            where.append("u.pid = :f_pid")
            params["f_pid"] = self.pid
        if self.comm is not None:
            where.append("u.comm = :f_comm")
            params["f_comm"] = self.comm
        if self.cpu is not None:
            where.append("u.cpu = :f_cpu")
            params["f_cpu"] = self.cpu
        if self.idle == "exclude":
            where.append("u.pid <> 0")
        elif self.idle == "only":
            where.append("u.pid = 0")
        return (" AND " + " AND ".join(where)) if where else "", params

    def public(self) -> dict[str, Any]:
        return {"pid": self.pid, "comm": self.comm, "cpu": self.cpu, "idle": self.idle}


# Writing ------------------------------------------------------------------------------------------


async def write(conn: AsyncConnection, host_id: str, ts: datetime, data: BatchStacks) -> None:
    """Store one batch's stacks inside the caller's transaction (see write_many)."""
    await write_many(conn, [(host_id, ts, data)])


async def write_many(conn: AsyncConnection, batches: list[tuple[str, datetime, BatchStacks]]) -> None:
    """Store the stacks of many batches inside the caller's transaction (the ingest writer's group
    commit): every definition in one upsert (refreshing seen_at of known ones), every row in one COPY."""
    defs = {(host_id, i): (m, f) for host_id, _, data in batches for i, m, f in data.defs}
    if defs:
        await conn.execute(
            text("""
            INSERT INTO stack_defs (host_id, stack_id, modules, frames, seen_at)
            SELECT d.h, d.id, CAST(d.modules AS jsonb), d.frames, now()
            FROM jsonb_to_recordset(CAST(:defs AS jsonb)) AS d(h text, id bigint, modules text, frames bigint[])
            ON CONFLICT (host_id, stack_id) DO UPDATE SET seen_at = now()"""),
            {
                "defs": orjson.dumps(
                    [
                        {"h": h, "id": u64_to_i64(i), "modules": orjson.dumps(m).decode(), "frames": f}
                        for (h, i), (m, f) in sorted(defs.items())
                    ]
                ).decode()
            },
        )
    if any(data.rows for _, _, data in batches):
        raw = await conn.get_raw_connection()
        assert raw.driver_connection is not None
        sql = "COPY stack_samples (host_id, ts, stack_id, count, pids, comms, cpus, counts) FROM STDIN"
        async with raw.driver_connection.cursor() as cur, cur.copy(sql) as copy:
            await copy.write(
                "".join(
                    copytext.row(
                        (
                            host,
                            stamp,
                            str(u64_to_i64(sid)),
                            str(total),
                            copytext.ints(pids),
                            copytext.texts(comms),
                            copytext.ints(cpus),
                            copytext.ints(counts),
                        )
                    )
                    for host, stamp, data in ((copytext.field(h), copytext.ts(t), d) for h, t, d in batches)
                    for sid, total, pids, comms, cpus, counts in data.rows
                ).encode()
            )


async def add_late(
    conn: AsyncConnection,
    batches: list[tuple[str, datetime, BatchStacks]],
    wm_1m: datetime,
    groups: dict[str, str] | None = None,
) -> None:
    """Sum the stacks of batches below the minute watermark into the minute and ten-minute rollups, inside
    the writer's transaction (which holds the watermark FOR SHARE, so the rollup task cannot sum them too);
    and into the kernel-build groups' rollups (migration 0020) with each host's group of `groups` (None: read
    from this database's hosts, the coordinator's), as the rollup task sums them."""
    sums: dict[tuple[str, datetime, int, int, str, int], int] = defaultdict(int)
    for host_id, ts, data in batches:
        if ts >= wm_1m:
            continue
        bucket = ts.replace(second=0, microsecond=0)
        for sid, _total, pids, comms, cpus, counts in data.rows:
            for pid, comm, cpu, n in zip(pids, comms, cpus, counts, strict=True):
                sums[(host_id, bucket, u64_to_i64(sid), pid, comm, cpu)] += n
    if not sums:
        return
    tens: dict[tuple[str, datetime, int, int, str, int], int] = defaultdict(int)
    for (h, b, i, p, c, cpu), n in sums.items():
        tens[(h, ten_minutes(b), i, p, c, cpu)] += n
    for table, rows in (("stack_samples_1m", sums), ("stack_samples_10m", tens)):
        insert = f"""
            INSERT INTO {table} (host_id, bucket, stack_id, pid, comm, cpu, count)
            SELECT r.h, r.b, r.id, r.pid, r.comm, r.cpu, r.n
            FROM jsonb_to_recordset(CAST(:rows AS jsonb))
                AS r(h text, b timestamptz, id bigint, pid integer, comm text, cpu integer, n bigint)
            ON CONFLICT (host_id, bucket, stack_id, pid, comm, cpu)
            DO UPDATE SET count = {table}.count + excluded.count"""
        # The ten-minute buckets written get a new version: readers' kept sums of them are stale now.
        await conn.execute(
            text(rollups.versioned_stack_blocks(insert) if table == "stack_samples_10m" else insert),
            {
                "rows": orjson.dumps(
                    [
                        {"h": h, "b": b.isoformat(), "id": i, "pid": p, "comm": c, "cpu": cpu, "n": n}
                        for (h, b, i, p, c, cpu), n in rows.items()
                    ]
                ).decode()
            },
        )
    await _add_late_groups(conn, sums, groups)


async def _add_late_groups(
    conn: AsyncConnection, sums: dict[tuple[str, datetime, int, int, str, int], int], groups: dict[str, str] | None
) -> None:
    """The late minutes' sums into the groups' rollups and the hosts' parts of them, minute and ten minutes."""
    if groups is None:
        groups = await rollups.host_groups(conn, sorted({k[0] for k in sums}))
    for grain in ("1m", "10m"):
        by_group: dict[tuple[str, datetime, int, bool], int] = defaultdict(int)
        by_host: dict[tuple[str, datetime, str, bool], int] = defaultdict(int)
        for (h, b, i, pid, _c, _cpu), n in sums.items():
            g = groups.get(h)
            if g is None:  # the rollup task's join leaves such a host out too
                continue
            bucket = b if grain == "1m" else ten_minutes(b)
            by_group[(g, bucket, i, pid == 0)] += n
            by_host[(h, bucket, g, pid == 0)] += n
        if not by_group:
            return
        sides: tuple[tuple[str, str, dict[Any, int]], ...] = (
            ("stack_group_samples", "bigint", by_group),
            ("stack_host_totals", "text", by_host),
        )
        for table, third, rows in sides:
            keys = sorted(rows)
            key = rollups.STACK_GROUP_KEYS[table]
            await conn.execute(
                text(f"""
                INSERT INTO {table}_{grain} ({key}, count)
                SELECT * FROM unnest(CAST(:a AS text[]), CAST(:b AS timestamptz[]), CAST(:c AS {third}[]),
                                     CAST(:d AS boolean[]), CAST(:n AS bigint[]))
                ON CONFLICT ({key}) DO UPDATE SET count = {table}_{grain}.count + excluded.count"""),
                {
                    "a": [k[0] for k in keys],
                    "b": [k[1] for k in keys],
                    "c": [k[2] for k in keys],
                    "d": [k[3] for k in keys],
                    "n": [rows[k] for k in keys],
                },
            )


async def known_ids(conn: AsyncConnection, host_id: str, ids: list[int]) -> set[int]:
    """Which of these stack ids the host has defined before."""
    if not ids:
        return set()
    rows = await conn.execute(
        text("SELECT stack_id FROM stack_defs WHERE host_id = :h AND stack_id = ANY(:ids)"),
        {"h": host_id, "ids": [u64_to_i64(i) for i in ids]},
    )
    return {i64_to_u64(r[0]) for r in rows}


async def prune_definitions(conn: AsyncConnection, cutoff: datetime) -> None:
    """Delete definitions no stored row refers to that were not defined again since `cutoff` (the rows
    themselves, raw and rolled up, go with their time partitions, app.storage.series.partitions), and the
    versions of ten-minute blocks before it."""
    await conn.execute(
        text("""
        DELETE FROM stack_defs d WHERE d.seen_at < :c
          AND NOT EXISTS (SELECT 1 FROM stack_samples s WHERE s.host_id = d.host_id AND s.stack_id = d.stack_id)
          AND NOT EXISTS (SELECT 1 FROM stack_samples_1m r WHERE r.host_id = d.host_id AND r.stack_id = d.stack_id)
          AND NOT EXISTS (SELECT 1 FROM stack_samples_10m t
                          WHERE t.host_id = d.host_id AND t.stack_id = d.stack_id)"""),
        {"c": cutoff},
    )
    # Versions of blocks past retention (a block without one is read from the rollups, never kept).
    await conn.execute(text("DELETE FROM stack_blocks WHERE bucket < :c"), {"c": cutoff - _TEN})


async def _functions_by_key(
    session: AsyncSession, pairs: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, str]]:
    """Kernel functions by (catalog digest, index): their id and name, in one query; unknown keys left out."""
    keys = list(pairs)
    if not keys:
        return {}
    ds, ix = zip(*keys, strict=True)
    rows = await session.execute(
        text("""
        SELECT f.id, f.digest, f.index AS fn_index, f.name FROM functions f
        JOIN unnest(CAST(:d AS text[]), CAST(:i AS int[])) AS q(d, i) ON f.digest = q.d AND f.index = q.i"""),
        {"d": list(ds), "i": list(ix)},
    )
    return {(r.digest, r.fn_index): (r.id, r.name) for r in rows}


async def delete_host(session: AsyncSession, host_id: str) -> None:
    # The groups' rollups keep its samples (they have no host): a group's reads then find its hosts' parts
    # short of the group's rows and read per host (`group_stacks`) until retention drops them.
    for table in (
        "stack_samples",
        "stack_samples_1m",
        "stack_samples_10m",
        "stack_host_totals_1m",
        "stack_host_totals_10m",
        "stack_blocks",
        "stack_defs",
    ):
        await session.execute(text(f"DELETE FROM {table} WHERE host_id = :h"), {"h": host_id})


# Reading: stacks of a range -------------------------------------------------------------------------


# What a frame is merged by: ("k", catalog digest, function index) for a kernel function, ("u", file) or
# ("u", file, offset) for user code, other code by its kind ("ka", "ua"; "a" in pprof) and maybe its address.
FrameKey = tuple[str | int, ...]
# A stack's definition as stored: its modules as the JSON column gives them ([kind, key, name] each) and
# its frames flattened (module position, function index, offset).
StoredStack = tuple[list[Any], list[int]]


@dataclass
class Frame:
    """A frame as trees show it: merged by function (kernel) or by address (elsewhere)."""

    key: FrameKey
    name: str
    module: str
    kind: str
    function_id: int | None = None


@dataclass
class RangeStacks:
    """A range's stacks after the filter: per stack id its samples, and per id its frames (leaf first,
    as (frame index into `frames`, offset))."""

    counts: dict[int, int]
    stacks: dict[int, list[tuple[int, int]]]
    frames: list[Frame]
    total: int  # samples of the filter (sum of counts, undefined stacks included)
    undefined: int  # samples of stacks whose definition is unknown


_MINUTE = timedelta(minutes=1)
_TEN = timedelta(minutes=10)
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # the origin of the ten-minute buckets (date_bin's in the SQL)


def ten_minutes(t: datetime) -> datetime:
    """The start of the ten-minute bucket holding `t` (UTC-aligned, as date_bin('10 minutes', t, 2000-01-01))."""
    return t - (t - _EPOCH) % _TEN


def _raw(lo: str, hi: str) -> str:
    return f"""SELECT s.stack_id, v.pid, v.comm, v.cpu, v.n
        FROM stack_samples s, unnest(s.pids, s.comms, s.cpus, s.counts) AS v(pid, comm, cpu, n)
        WHERE s.host_id = :h AND s.ts >= :{lo} AND s.ts < :{hi}"""


def _rolled(table: str, lo: str, hi: str) -> str:
    return f"""SELECT r.stack_id, r.pid, r.comm, r.cpu, r.count AS n FROM {table} r
        WHERE r.host_id = :h AND r.bucket >= :{lo} AND r.bucket < :{hi}"""


def _source(where: str) -> str:
    """FROM and WHERE of the range's samples as u(stack_id, pid, comm, cpu, n) after the filter `where`:
    whole ten minutes [:lo10, :hi10) from the ten-minute rollup, the other whole minutes of [:lo, :hi) from
    the minute rollup, the rest of [:s, :e) from the raw rows (see _span)."""
    parts = [
        _rolled("stack_samples_10m", "lo10", "hi10"),
        _rolled("stack_samples_1m", "lo", "lo10"),
        _rolled("stack_samples_1m", "hi10", "hi"),
        _raw("s", "lo"),
        _raw("hi", "e"),
    ]
    return f"""FROM ({" UNION ALL ".join(parts)}) u
        WHERE true{where}"""


async def _span(session: AsyncSession, host_id: str, start: datetime, end: datetime) -> dict[str, Any]:
    """The parameters of `_source`: the whole minutes of [start, end) below the minute watermark are
    [lo, hi) (empty, at `end`, when there are none), and the whole ten minutes within them [lo10, hi10)
    (empty, at `hi`, when there are none). Both rollups are summed in the same transactions (the rollup
    task's, the writer's for late stacks), rollup rows below a watermark read before the query are
    complete, and the raw rows stay, so a watermark moving meanwhile changes nothing."""
    wm_1m, _ = await rollups.watermarks(await session.connection())
    lo = start if start == start.replace(second=0, microsecond=0) else start.replace(second=0, microsecond=0) + _MINUTE
    hi = min(end, wm_1m)
    hi = hi.replace(second=0, microsecond=0)
    if hi <= lo:
        lo = hi = end
    lo10, hi10 = _whole_tens(lo, hi)
    return {"h": host_id, "s": start, "e": end, "lo": lo, "hi": hi, "lo10": lo10, "hi10": hi10}


def _whole_tens(lo: datetime, hi: datetime) -> tuple[datetime, datetime]:
    """The whole ten minutes [lo10, hi10) within the whole minutes [lo, hi) (empty, at hi, when none)."""
    lo10 = lo if ten_minutes(lo) == lo else ten_minutes(lo) + _TEN
    hi10 = ten_minutes(hi)
    return (lo10, hi10) if lo10 < hi10 else (hi, hi)


async def _counts(
    session: AsyncSession, host_id: str, start: datetime, end: datetime, flt: StackFilter
) -> dict[int, int]:
    where, params = flt.sql()
    rows = await session.execute(
        text(f"SELECT u.stack_id, sum(u.n) AS n {_source(where)} GROUP BY u.stack_id"),
        {**await _span(session, host_id, start, end), **params},
    )
    return {i64_to_u64(r.stack_id): int(r.n) for r in rows}


class FrameResolver:
    """Turns stored frames into `Frame`s, merging kernel frames by function, and resolving catalog
    (digest, index) pairs to function ids and names in one query per batch of stacks."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.index: dict[FrameKey, int] = {}

    def _get(self, key: FrameKey, make: Callable[[], Frame]) -> int:
        i = self.index.get(key)
        if i is None:
            i = len(self.frames)
            self.index[key] = i
            self.frames.append(make())
        return i

    async def resolve(
        self, session: AsyncSession, host_id: str, defs: dict[int, StoredStack]
    ) -> dict[int, list[tuple[int, int]]]:
        pairs: set[tuple[str, int]] = set()
        for modules, flat in defs.values():
            for k in range(0, len(flat), 3):
                m = modules[flat[k]] if 0 <= flat[k] < len(modules) else None
                if m and m[0] == KERNEL_FUNCTION:
                    pairs.add((m[1], flat[k + 1]))
        names = await _functions_by_key(session, pairs)
        out: dict[int, list[tuple[int, int]]] = {}
        for sid, (modules, flat) in defs.items():
            frames = []
            for k in range(0, len(flat), 3):
                mi, fn, off = flat[k], flat[k + 1], i64_to_u64(flat[k + 2])
                kind, mkey, mname = modules[mi] if 0 <= mi < len(modules) else (USER_ADDRESS, "", "")
                frames.append((self._frame(kind, mkey, mname, fn, off, names), off))
            out[sid] = frames
        return out

    def _frame(
        self, kind: int, mkey: str, mname: str, fn: int, off: int, names: dict[tuple[str, int], tuple[int, str]]
    ) -> int:
        if kind == KERNEL_FUNCTION:
            hit = names.get((mkey, fn))
            return self._get(
                ("k", mkey, fn),
                lambda: Frame(
                    ("k", mkey, fn),
                    hit[1] if hit else f"{mname or mkey[:12]}#{fn}",
                    mname or "vmlinux",
                    "kernel",
                    hit[0] if hit else None,
                ),
            )
        if kind == USER_FILE:
            base = os.path.basename(mkey) or mkey
            return self._get(("u", mkey, off), lambda: Frame(("u", mkey, off), f"{base}+{off:#x}", mkey, "user"))
        if kind == KERNEL_ADDRESS:
            return self._get(("ka", off), lambda: Frame(("ka", off), f"{off:#x}", "[kernel]", "kernel_address"))
        return self._get(("ua", off), lambda: Frame(("ua", off), f"{off:#x}", "[unknown]", "user_address"))


async def definitions(session: AsyncSession, host_id: str, ids: list[int]) -> dict[int, StoredStack]:
    out: dict[int, StoredStack] = {}
    for k in range(0, len(ids), 20000):
        chunk = [u64_to_i64(i) for i in ids[k : k + 20000]]
        rows = await session.execute(
            text("""
            SELECT stack_id, modules::text AS modules, frames FROM stack_defs
            WHERE host_id = :h AND stack_id = ANY(:ids)"""),
            {"h": host_id, "ids": chunk},
        )
        for r in rows:
            out[i64_to_u64(r.stack_id)] = (orjson.loads(r.modules), r.frames)
    return out


async def shared_definitions(session: AsyncSession, host_ids: list[str], ids: list[int]) -> dict[int, StoredStack]:
    """These stacks' definitions as one of these hosts stored them (content ids: any host's is the same)."""
    out: dict[int, StoredStack] = {}
    if not host_ids:
        return out
    for k in range(0, len(ids), 20000):
        chunk = [u64_to_i64(i) for i in ids[k : k + 20000]]
        rows = await session.execute(
            text("""
            SELECT DISTINCT ON (d.stack_id) d.stack_id, d.modules::text AS modules, d.frames
            FROM stack_defs d WHERE d.stack_id = ANY(:ids) AND d.host_id = ANY(:hs)
            ORDER BY d.stack_id"""),
            {"hs": host_ids, "ids": chunk},
        )
        for r in rows:
            out[i64_to_u64(r.stack_id)] = (orjson.loads(r.modules), r.frames)
    return out


@dataclass
class _Sums:
    """What some of a range's samples add to a flame graph under one filter: the filter's samples per
    stack (stored ids, in parallel arrays; a stack none of whose samples match is left out) and all the
    samples per process and per CPU (the filter menus', which no filter narrows)."""

    ids: "array[int]"
    counts: "array[int]"
    procs: dict[tuple[int, str], int]
    cpus: dict[int, int]

    @classmethod
    def empty(cls) -> "_Sums":
        return cls(array("q"), array("q"), {}, {})

    def size(self) -> int:
        return len(self.ids) + len(self.procs) + len(self.cpus)


# A part of a range's samples: a closed block ((10, ten-minute bucket) or (1, minute)), or (0, None) for the
# raw rows at the range's edges.
Part = tuple[int, datetime | None]
# A closed block's sums as kept: host, grain (10 or 1 minutes), block start, its ten minutes' version, filter.
BlockKey = tuple[str, int, datetime, int, StackFilter]


class BlockSums:
    """The `_Sums` of closed blocks (whole ten minutes and whole minutes below the minute watermark, read
    from the rollups) per host, filter and version of the block's ten minutes (`stack_blocks`: every write
    into a ten-minute bucket of the rollups, late batches' too, gives it a new version), kept per process:
    a flame graph of an hour then reads only its edges and the blocks it has not seen under their current
    version. Bounded by the stacks and contexts kept (least recently used out). One version per host,
    block and filter: a block's sums under a newer version replace those under an older one, which no
    view can use again (versions only grow), so late batches renewing a block again and again (an agent's
    spool sent after a reconnect) do not fill the bound with sums nobody reads."""

    def __init__(self, limit: int = 4_000_000) -> None:
        self.limit = limit
        self.kept = 0
        self.entries: OrderedDict[BlockKey, _Sums] = OrderedDict()
        # (host, grain, block, filter) -> the version whose sums are kept
        self.versions: dict[tuple[str, int, datetime, StackFilter], int] = {}

    def get(self, key: BlockKey) -> _Sums | None:
        got = self.entries.get(key)
        if got is not None:
            self.entries.move_to_end(key)
        return got

    def _drop(self, key: BlockKey) -> None:
        old = self.entries.pop(key, None)
        if old is not None:
            self.kept -= old.size()
            host, g, block, version, flt = key
            if self.versions.get((host, g, block, flt)) == version:
                del self.versions[(host, g, block, flt)]

    def put(self, key: BlockKey, sums: _Sums) -> None:
        host, g, block, version, flt = key
        kept = self.versions.get((host, g, block, flt))
        if kept is not None and kept > version:
            return  # read under a version already replaced: a newer one is kept
        if kept is not None:
            self._drop((host, g, block, kept, flt))
        self.entries[key] = sums
        self.versions[(host, g, block, flt)] = version
        self.kept += sums.size()
        while self.kept > self.limit and self.entries:
            self._drop(next(iter(self.entries)))


_BLOCKS = BlockSums()


@dataclass
class _Window:
    """What the closed minutes [lo, hi) of a range add to a flame graph under one filter, merged, with
    the version of every ten minutes they meet when they were summed."""

    lo: datetime
    hi: datetime
    versions: dict[datetime, int]
    sums: _Sums

    def valid(self, versions: dict[datetime, int]) -> bool:
        return all(versions.get(b) == v for b, v in self.versions.items())


class WindowSums:
    """The merged `_Sums` of the closed part of the last ranges asked per host and filter (`_Window`, a
    few per host and filter, newest first), kept per process: a range that differs from one of them by a
    few blocks at its ends (a rolling hour asked again a minute later) starts from its sums and adds or
    takes away only those blocks, instead of adding up every block of the range (an hour: five ten
    minutes and up to eighteen minutes, ~370,000 stacks and contexts on bench/flame's hour). Usable only
    while every ten minutes it meets keeps its version (`stack_blocks`), so a late batch or dropped rows
    are never hidden. Bounded by the stacks and contexts kept (least recently used out)."""

    def __init__(self, limit: int = 2_000_000, per_key: int = 3) -> None:
        self.limit = limit
        self.per_key = per_key
        self.kept = 0
        self.entries: OrderedDict[tuple[str, StackFilter], list[_Window]] = OrderedDict()

    def get(self, host_id: str, flt: StackFilter) -> list[_Window]:
        got = self.entries.get((host_id, flt))
        if got is None:
            return []
        self.entries.move_to_end((host_id, flt))
        return list(got)

    def holds(self, host_id: str, flt: StackFilter, lo: datetime, hi: datetime) -> bool:
        """Whether a window of [lo, hi) is kept (whatever its versions), without touching its order."""
        return any((w.lo, w.hi) == (lo, hi) for w in self.entries.get((host_id, flt), []))

    def put(self, host_id: str, flt: StackFilter, window: _Window) -> None:
        key = (host_id, flt)
        old = self.entries.pop(key, [])
        others = [w for w in old if (w.lo, w.hi) != (window.lo, window.hi)]
        kept = [window, *others[: self.per_key - 1]]
        self.kept += sum(w.sums.size() for w in kept) - sum(w.sums.size() for w in old)
        self.entries[key] = kept
        while self.kept > self.limit and self.entries:
            self.kept -= sum(w.sums.size() for w in self.entries.popitem(last=False)[1])


_WINDOWS = WindowSums()


async def _block_versions(session: AsyncSession, host_id: str, lo: datetime, hi: datetime) -> dict[datetime, int]:
    """The versions of the host's ten-minute blocks meeting [lo, hi) whose rows are stored (a block dropped
    by retention keeps its version row until pruned: its sums must not be used)."""
    rows = await session.execute(
        text("""
        SELECT b.bucket, b.version FROM stack_blocks b
        WHERE b.host_id = :h AND b.bucket >= :lo AND b.bucket < :hi
          AND EXISTS (SELECT 1 FROM stack_samples_10m t WHERE t.host_id = b.host_id AND t.bucket = b.bucket)"""),
        {"h": host_id, "lo": ten_minutes(lo), "hi": hi},
    )
    return {r.bucket: r.version for r in rows}


def _steps(lo: datetime, hi: datetime, step: timedelta) -> list[datetime]:
    out = []
    while lo < hi:
        out.append(lo)
        lo += step
    return out


def _blocks(lo: datetime, hi: datetime, tens: tuple[datetime, datetime] | None = None) -> list[tuple[int, datetime]]:
    """The closed blocks of the whole minutes [lo, hi) (none when hi <= lo): the whole ten minutes `tens`
    ([lo10, hi10), by default `_whole_tens`) as (10, bucket), then its other minutes as (1, minute)."""
    if hi <= lo:
        return []
    lo10, hi10 = tens or _whole_tens(lo, hi)
    return [(10, b) for b in _steps(lo10, hi10, _TEN)] + [
        (1, m) for m in _steps(lo, lo10, _MINUTE) + _steps(hi10, hi, _MINUTE)
    ]


async def _part_sums(
    session: AsyncSession, span: dict[str, Any], flt: StackFilter, tens: list[datetime], minutes: list[datetime]
) -> dict[Part, _Sums]:
    """The `_Sums` of these closed blocks (ten-minute buckets, minutes) and of the range's raw edges
    ((0, None)): the filter's rows of each part as one row of arrays, summed per stack here, and each
    part's samples per context grouped by the database. A rollup row is one stack and context already,
    so grouping the ~200,000 rows of an hour's blocks per part and stack in the database only sorted them
    (1.6 times the old pass over the whole range on the bench's hour; this, about the same as that pass)."""
    where, params = flt.sql()
    parts = [
        f"""SELECT 0 AS g, NULL::timestamptz AS b, u.* FROM ({_raw("s", "lo")} UNION ALL {_raw("hi", "e")}) u""",
    ]
    if tens:
        parts.append(
            f"SELECT 10, r.bucket, r.stack_id, r.pid, r.comm, r.cpu, r.count {_rollup_part('stack_samples_10m', 't')}"
        )
    if minutes:
        parts.append(
            f"SELECT 1, r.bucket, r.stack_id, r.pid, r.comm, r.cpu, r.count {_rollup_part('stack_samples_1m', 'm')}"
        )
    source = f"FROM ({' UNION ALL '.join(parts)}) u"
    matching = f"{source} WHERE true{where}"
    bind = {
        **span,
        **params,
        "t": tens,
        "t_lo": min(tens, default=span["e"]),
        "t_hi": max(tens, default=span["e"]) + _TEN,
        "m": minutes,
        "m_lo": min(minutes, default=span["e"]),
        "m_hi": max(minutes, default=span["e"]) + _MINUTE,
    }
    out: dict[Part, _Sums] = {(0, None): _Sums.empty()}
    out.update({(10, b): _Sums.empty() for b in tens})
    out.update({(1, b): _Sums.empty() for b in minutes})
    rows = await session.execute(
        text(f"SELECT u.g, u.b, array_agg(u.stack_id) AS ids, array_agg(u.n) AS ns {matching} GROUP BY 1, 2"),
        bind,
    )
    for r in rows:
        sums: dict[int, int] = defaultdict(int)
        for sid, n in zip(r.ids, r.ns, strict=True):
            sums[sid] += n
        out[(r.g, r.b)].ids.extend(sums.keys())
        out[(r.g, r.b)].counts.extend(sums.values())
    rows = await session.execute(
        text(f"SELECT u.g, u.b, u.pid, u.comm, u.cpu, sum(u.n) AS n {source} GROUP BY 1, 2, 3, 4, 5"), bind
    )
    for r in rows:
        part = out[(r.g, r.b)]
        part.procs[(r.pid, r.comm)] = part.procs.get((r.pid, r.comm), 0) + int(r.n)
        part.cpus[r.cpu] = part.cpus.get(r.cpu, 0) + int(r.n)
    return out


def _rollup_part(table: str, name: str) -> str:
    """FROM and WHERE of the rollup rows of the buckets in :{name} (bounded by :{name}_lo and :{name}_hi,
    so the planner reads only their partitions)."""
    return f"""FROM {table} r WHERE r.host_id = :h AND r.bucket >= :{name}_lo AND r.bucket < :{name}_hi
        AND r.bucket = ANY(:{name})"""


def _merge(base: _Sums | None, add: Iterable[_Sums], take: Iterable[_Sums] = ()) -> _Sums:
    """`base` (copied, not changed) plus the sums in `add` minus those in `take`; what comes to zero is
    left out, as a stack or context with no samples is."""
    take = list(take)
    counts = dict(zip(base.ids, base.counts, strict=True)) if base is not None else {}
    procs = dict(base.procs) if base is not None else {}
    cpus = dict(base.cpus) if base is not None else {}
    for sign, parts in ((1, add), (-1, take)):
        for s in parts:
            for sid, n in zip(s.ids, s.counts, strict=True):
                counts[sid] = counts.get(sid, 0) + sign * n
            for p, n in s.procs.items():
                procs[p] = procs.get(p, 0) + sign * n
            for c, n in s.cpus.items():
                cpus[c] = cpus.get(c, 0) + sign * n
    if take:  # only what was taken away can come to zero
        counts = {sid: n for sid, n in counts.items() if n}
        procs = {p: n for p, n in procs.items() if n}
        cpus = {c: n for c, n in cpus.items() if n}
    return _Sums(array("q", counts.keys()), array("q", counts.values()), procs, cpus)


async def _range_sums(
    session: AsyncSession, host_id: str, span: dict[str, Any], flt: StackFilter, keep: bool = True
) -> tuple[_Sums, _Sums]:
    """The `_Sums` of a range's closed minutes [lo, hi) (`_span`) and of its raw edges, read in one pass
    (`_part_sums`). The closed part starts from the kept window (`WindowSums`) that leaves the fewest
    blocks to add or take away, or else adds up its blocks; each block's sums come from `BlockSums`
    (kept by filter and version) or are read, and kept when `keep`; the closed part is kept as a window
    when every ten minutes it meets has a version."""
    lo, hi = span["lo"], span["hi"]
    blocks = _blocks(lo, hi, (span["lo10"], span["hi10"]))
    windows = _WINDOWS.get(host_id, flt) if blocks else []
    vlo, vhi = min([lo, *(w.lo for w in windows)]), max([hi, *(w.hi for w in windows)])
    versions = await _block_versions(session, host_id, vlo, vhi) if blocks else {}
    own = {b: versions.get(b) for b in _steps(ten_minutes(lo), hi, _TEN)}  # the ten minutes [lo, hi) meets
    versioned = bool(blocks) and None not in own.values()
    base: _Window | None = None
    add: list[tuple[int, datetime]] = blocks
    take: list[tuple[int, datetime]] = []
    if versioned:
        for w in windows:
            if not w.valid(versions) or w.hi <= lo or hi <= w.lo:
                continue
            # The range's minutes outside the window are added, the window's outside the range taken away.
            w_add = _blocks(lo, min(hi, w.lo)) + _blocks(max(lo, w.hi), hi)
            w_take = _blocks(w.lo, min(w.hi, lo)) + _blocks(max(w.lo, hi), w.hi)
            if 1 + len(w_add) + len(w_take) < (len(add) + len(take) + (base is not None)):
                base, add, take = w, w_add, w_take
    found: dict[tuple[int, datetime], _Sums] = {}
    missing: dict[int, list[datetime]] = {10: [], 1: []}
    for g, b in add + take:
        v = versions.get(ten_minutes(b))
        got = _BLOCKS.get((host_id, g, b, v, flt)) if v is not None else None
        if got is None:
            missing[g].append(b)
        else:
            found[(g, b)] = got
    if missing[10] or missing[1] or span["s"] < lo or hi < span["e"]:
        read = await _part_sums(session, span, flt, missing[10], missing[1])
    else:  # nothing to read (the rollup task's window: no raw edges)
        read = {(0, None): _Sums.empty()}
    for (g, block), sums in read.items():
        if block is None:
            continue
        found[(g, block)] = sums
        v = versions.get(ten_minutes(block))
        if keep and v is not None:
            _BLOCKS.put((host_id, g, block, v, flt), sums)
    if base is not None and not add and not take:
        closed = base.sums
    else:
        closed = _merge(base.sums if base else None, (found[p] for p in add), (found[p] for p in take))
    if versioned:
        _WINDOWS.put(host_id, flt, _Window(lo, hi, {b: v for b, v in own.items() if v is not None}, closed))
    return closed, read[(0, None)]


async def keep_closed_blocks(
    session: AsyncSession, now: datetime, back: timedelta = timedelta(hours=1), budget: int = 36, hosts: int = 8
) -> int:
    """Sum, under the flame graph's default filter, the closed ten-minute blocks of the last `back` whose
    sums are not kept under their current version, at most `budget` blocks (the oldest hosts' first), and
    keep them (`BlockSums`), as the rollup task closes them; then bring the window of the closed minutes
    a view of the last `back` ending now reads (`WindowSums`) up to date for up to `hosts` hosts whose
    ten minutes are all kept now: a host's first flame graph of the last hour then adds to that window a minute or
    two at its ends and reads its raw edges, not every block. Nothing is summed while the kept sums fill
    half their bound (a fleet's hour would otherwise push out what views keep, and be summed again and
    again). Returns the ten-minute blocks summed."""
    if _BLOCKS.kept > _BLOCKS.limit // 2:
        return 0
    wm_1m, _ = await rollups.watermarks(await session.connection())
    hi = min(now, wm_1m).replace(second=0, microsecond=0)
    hi10 = ten_minutes(hi)
    rows = await session.execute(
        text("""
        SELECT b.host_id, b.bucket, b.version FROM stack_blocks b
        WHERE b.bucket >= :lo AND b.bucket < :hi
          AND EXISTS (SELECT 1 FROM stack_samples_10m t WHERE t.host_id = b.host_id AND t.bucket = b.bucket)
        ORDER BY b.host_id, b.bucket"""),
        {"lo": ten_minutes(now - back), "hi": hi10},
    )
    flt = StackFilter()
    missing: dict[str, dict[datetime, int]] = defaultdict(dict)
    seen: list[str] = []
    short: set[str] = set()  # hosts with blocks left for the next passes
    for r in rows:
        if not seen or seen[-1] != r.host_id:
            seen.append(r.host_id)
        if _BLOCKS.get((r.host_id, 10, r.bucket, r.version, flt)) is None:
            if budget > 0:
                missing[r.host_id][r.bucket] = r.version
                budget -= 1
            else:
                short.add(r.host_id)
    for host_id, versions in missing.items():
        # An empty range at the end of the blocks: no raw edges, no minutes, only these ten minutes.
        span = {"h": host_id, "s": hi10, "e": hi10, "lo": hi10, "hi": hi10, "lo10": hi10, "hi10": hi10}
        read = await _part_sums(session, span, flt, sorted(versions), [])
        for (g, block), sums in read.items():
            if g == 10 and block is not None:
                _BLOCKS.put((host_id, g, block, versions[block], flt), sums)
    # The closed minutes of a view of the last `back` asked now (from mid-minute: its first whole minute).
    lo = now.replace(second=0, microsecond=0) + _MINUTE - back
    if hi > lo and _WINDOWS.kept <= _WINDOWS.limit // 2:
        due = [h for h in seen if h not in short and not _WINDOWS.holds(h, flt, lo, hi)]
        for host_id in due[:hosts]:
            lo10, hi10 = _whole_tens(lo, hi)  # no raw edges: the range is its whole minutes
            span = {"h": host_id, "s": lo, "e": hi, "lo": lo, "hi": hi, "lo10": lo10, "hi10": hi10}
            await _range_sums(session, host_id, span, flt, keep=False)
    return sum(len(v) for v in missing.values())


async def _counts_and_contexts(
    session: AsyncSession, host_id: str, start: datetime, end: datetime, flt: StackFilter
) -> tuple[dict[int, int], dict[str, Any]]:
    """The filter's samples per stack id (as `_counts`) and who all the range's samples belong to (before
    any filter: processes, commands, CPUs, and the idle task's share): the closed part and the raw edges
    as `_range_sums` gives them."""
    closed, edges = await _range_sums(session, host_id, await _span(session, host_id, start, end), flt)
    both = _merge(closed, [edges]) if edges.size() else closed
    by_proc = sorted(((pid, comm, n) for (pid, comm), n in both.procs.items()), key=lambda p: (-p[2], p[0]))
    comms: dict[str, int] = defaultdict(int)
    for _, comm, n in by_proc:
        comms[comm] += n
    ctx = {
        "processes": [{"pid": pid, "comm": comm, "samples": n} for pid, comm, n in by_proc[:500]],
        "commands": [{"comm": c, "samples": n} for c, n in sorted(comms.items(), key=lambda c: (-c[1], c[0]))[:500]],
        "cpus": [{"cpu": cpu, "samples": n} for cpu, n in sorted(both.cpus.items())],
        "all_samples": sum(both.cpus.values()),
        "idle_samples": sum(n for pid, _, n in by_proc if pid == 0),
    }
    return {i64_to_u64(sid): n for sid, n in zip(both.ids, both.counts, strict=True)}, ctx


# Trees ------------------------------------------------------------------------------------------


def build_tree(sides: list[dict[bytes, int]], max_nodes: int = MAX_NODES) -> dict[str, Any]:
    """Merge the paths of one or more ranges (each path: frame ids leaf first, packed as array('I') bytes,
    with its samples) into one tree in pre-order, root first, children by samples (of all sides)
    descending; per node and side its total and self samples. Nodes beyond max_nodes are folded into their
    parent (counted in `folded`).

    An hour holds tens of thousands of distinct paths of ~20 frames, too many to walk frame by frame in
    Python: the paths are sorted root first, so each one shares its longest common prefix with the one
    before it (found by comparing byte prefixes) and only its remaining frames are new nodes, appended
    with list operations; nodes are numbered in that order (a parent before its children, ties broken
    by it). Samples are added at each path's end and summed up the tree in one backward pass."""
    nsides = len(sides)
    by_path: dict[bytes, list[int]] = {}
    for si, side in enumerate(sides):
        for packed, count in side.items():
            path = array("I")
            path.frombytes(packed)
            path.reverse()
            by_path.setdefault(path.tobytes(), [0] * nsides)[si] += count
    frame_of = [-1]
    parent = [-1]
    ends: list[tuple[int, list[int]]] = []
    chain: list[int] = []  # the previous path's nodes, root's child first
    prev = b""
    for rooted in sorted(by_path):
        # Common prefix with the previous path, in frames (4 bytes each): a binary search on byte prefixes.
        lo, hi = 0, min(len(rooted), len(prev)) // 4
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if rooted[: 4 * mid] == prev[: 4 * mid]:
                lo = mid
            else:
                hi = mid - 1
        depth = len(rooted) // 4
        if depth > lo:
            first = len(frame_of)
            path = array("I")
            path.frombytes(rooted[4 * lo :])
            frame_of.extend(path)
            parent.append(chain[lo - 1] if lo else 0)
            parent.extend(range(first, first + depth - lo - 1))
            del chain[lo:]
            chain.extend(range(first, first + depth - lo))
        ends.append((chain[depth - 1] if depth else 0, by_path[rooted]))
        prev = rooted
    n = len(frame_of)
    selfs = [[0] * n for _ in range(nsides)]
    for node, counts in ends:
        for si in range(nsides):
            selfs[si][node] += counts[si]
    totals = []
    for own in selfs:
        total = own.copy()
        for i in range(n - 1, 0, -1):
            total[parent[i]] += total[i]
        totals.append(total)
    weight = totals[0] if nsides == 1 else [sum(t) for t in zip(*totals, strict=True)]
    # Heaviest first, ties in node order (a parent before its children, so the kept set is a tree).
    order = sorted(range(1, n), key=weight.__getitem__, reverse=True)
    folded = 0
    if n > max_nodes:
        keep = [True] * n
        dropped = order[max_nodes - 1 :]
        del order[max_nodes - 1 :]
        for i in dropped:
            keep[i] = False
        for i in dropped:
            if keep[parent[i]]:
                for si in range(nsides):
                    selfs[si][parent[i]] += totals[si][i]
                folded += weight[i]
    kids: list[list[int] | None] = [None] * n
    for i in order:
        k = kids[parent[i]]
        if k is None:
            kids[parent[i]] = [i]
        else:
            k.append(i)
    pos = [0] * n
    visited: list[int] = []  # the kept nodes in pre-order
    out_parent: list[int] = []
    stack = [0]
    while stack:
        node = stack.pop()
        pos[node] = len(visited)
        visited.append(node)
        out_parent.append(pos[parent[node]] if node else -1)
        k = kids[node]
        if k is not None:
            stack.extend(reversed(k))
    return {
        "frame": [frame_of[v] for v in visited],
        "parent": out_parent,
        "total": [[t[v] for v in visited] for t in totals],
        "self": [[o[v] for v in visited] for o in selfs],
        "folded": folded,
    }


class StackPaths:
    """Each stack as the trees see it — its frames as interned frame ids, leaf first, user frames merged
    by file (consecutive ones into one) and addresses outside known code by kind — cached per process.
    A stack id names its frames for good (content-addressed), so an entry never goes stale; the cache is
    bounded (least recently used out), and a kernel frame whose catalog piece was not stored yet is named
    again once it is."""

    def __init__(self, limit: int = 400_000) -> None:
        self.limit = limit
        self.keys: dict[FrameKey, int] = {}
        self.frames: list[Frame] = []
        self.unresolved: set[int] = set()
        self.paths: OrderedDict[tuple[str, int], bytes] = OrderedDict()

    def _frame(self, key: FrameKey, make: Callable[[], Frame]) -> int:
        i = self.keys.get(key)
        if i is None:
            i = self.keys[key] = len(self.frames)
            self.frames.append(make())
            if key[0] == "k":
                self.unresolved.add(i)
        return i

    def _intern(self, kind: int, mkey: str, mname: str, fn: int) -> int:
        if kind == KERNEL_FUNCTION:
            return self._frame(
                ("k", mkey, fn),
                lambda: Frame(("k", mkey, fn), f"{mname or mkey[:12]}#{fn}", mname or "vmlinux", "kernel"),
            )
        if kind == USER_FILE:
            return self._frame(("u", mkey), lambda: Frame(("u", mkey), os.path.basename(mkey) or mkey, mkey, "user"))
        if kind == KERNEL_ADDRESS:
            return self._frame(
                ("ka",), lambda: Frame(("ka",), "[kernel code outside known functions]", "[kernel]", "kernel_address")
            )
        return self._frame(
            ("ua",), lambda: Frame(("ua",), "[user code outside mapped files]", "[unknown]", "user_address")
        )

    async def load(self, session: AsyncSession, host_id: str, ids: Iterable[int]) -> dict[int, bytes]:
        """The paths of these stacks (those with a definition)."""
        out: dict[int, bytes] = {}
        missing = []
        for sid in ids:
            packed = self.paths.get((host_id, sid))
            if packed is None:
                missing.append(sid)
            else:
                self.paths.move_to_end((host_id, sid))
                out[sid] = packed
        self._keep(host_id, await definitions(session, host_id, missing), out)
        await self._name(session, out.values())
        return out

    async def load_shared(self, session: AsyncSession, host_ids: list[str], ids: Iterable[int]) -> dict[int, bytes]:
        """The paths of these stacks as any of these hosts defined them (those with a definition on one of
        them). A stack id is the content id of its frames (checked as each batch is read:
        app.protocol.agent_input), so every host that defines an id defines the same frames: the paths are
        kept once, under no host (""), for every group they are asked for."""
        out: dict[int, bytes] = {}
        missing = []
        for sid in ids:
            packed = self.paths.get(("", sid))
            if packed is None:
                missing.append(sid)
            else:
                self.paths.move_to_end(("", sid))
                out[sid] = packed
        self._keep("", await shared_definitions(session, host_ids, missing), out)
        await self._name(session, out.values())
        return out

    def _keep(self, host_id: str, defs: dict[int, StoredStack], out: dict[int, bytes]) -> None:
        for sid, (modules, flat) in defs.items():
            path = array("I")
            for k in range(0, len(flat), 3):
                mi = flat[k]
                kind, mkey, mname = modules[mi] if 0 <= mi < len(modules) else (USER_ADDRESS, "", "")
                fi = self._intern(kind, mkey, mname, flat[k + 1])
                # Consecutive frames of one file without symbols are one frame: they cannot be told apart.
                if kind != KERNEL_FUNCTION and path and path[-1] == fi:
                    continue
                path.append(fi)
            packed = out[sid] = path.tobytes()
            self.paths[(host_id, sid)] = packed
        while len(self.paths) > self.limit:
            self.paths.popitem(last=False)

    async def _name(self, session: AsyncSession, paths: Iterable[bytes]) -> None:
        """Give kernel frames of these paths not named yet their function's name and id."""
        if not self.unresolved:
            return
        wanted: set[int] = set()
        for packed in paths:
            path = array("I")
            path.frombytes(packed)
            wanted.update(fi for fi in path if fi in self.unresolved)
        if not wanted:
            return
        pairs = [(str(self.frames[i].key[1]), int(self.frames[i].key[2])) for i in wanted]  # ("k", digest, index)
        for (digest, fn_index), (fid, name) in (await _functions_by_key(session, pairs)).items():
            i = self.keys[("k", digest, fn_index)]
            self.frames[i].name, self.frames[i].function_id = name, fid
            self.unresolved.discard(i)


_PATHS = StackPaths()


async def _merged_paths(
    session: AsyncSession,
    host_id: str,
    start: datetime,
    end: datetime,
    flt: StackFilter,
    counts: dict[int, int] | None = None,
) -> tuple[dict[bytes, int], int, int]:
    """The range's samples per distinct path (stacks that differ only below the trees' merging are one
    path), the samples of the filter, and those of stacks without a definition (`counts`: the filter's
    samples per stack when the caller read them already)."""
    if counts is None:
        counts = await _counts(session, host_id, start, end, flt)
    paths = await _PATHS.load(session, host_id, counts)
    return _by_path(counts, paths)


def _by_path(counts: dict[int, int], paths: dict[int, bytes]) -> tuple[dict[bytes, int], int, int]:
    """Samples per stack summed per path: the samples per distinct path, all samples, and those of stacks
    without a path (no definition)."""
    merged: dict[bytes, int] = defaultdict(int)
    undefined = 0
    for sid, n in counts.items():
        packed = paths.get(sid)
        if packed is None:
            undefined += n
        else:
            merged[packed] += n
    return dict(merged), sum(counts.values()), undefined


def _local_frames(tree: dict[str, Any]) -> list[dict[str, Any]]:
    """Renumber a tree's frames (process-wide ids) to positions in the response's frame list."""
    local: dict[int, int] = {}
    frames: list[Frame] = []
    out: list[int] = []
    for fi in tree["frame"]:
        if fi < 0:
            out.append(-1)
            continue
        j = local.get(fi)
        if j is None:
            j = local[fi] = len(frames)
            frames.append(_PATHS.frames[fi])
        out.append(j)
    tree["frame"] = out
    return _frames_public(frames)


def _frames_public(frames: list[Frame]) -> list[dict[str, Any]]:
    return [{"name": f.name, "module": f.module, "kind": f.kind, "function_id": f.function_id} for f in frames]


def _rooted(paths: Iterable[bytes]) -> tuple[list[dict[str, Any]], list[int], list[int]]:
    """Paths (packed frame ids, leaf first) as a reply gives them: the frames they use, every path's
    frames root first as positions in that list, one path after the other, and each path's length."""
    rooted = array("I")
    lengths = []
    for packed in paths:
        path = array("I")
        path.frombytes(packed)
        path.reverse()
        rooted.extend(path)
        lengths.append(len(path))
    used = sorted(set(rooted))
    local = {fi: j for j, fi in enumerate(used)}
    return _frames_public([_PATHS.frames[fi] for fi in used]), [local[fi] for fi in rooted], lengths


async def flame_graph(
    session: AsyncSession, host_id: str, start: datetime, end: datetime, flt: StackFilter
) -> dict[str, Any]:
    """The range's distinct paths (frames root first, as positions in the reply's frame list) with their
    samples, and who the samples belong to; the console merges the paths into the tree (an hour's tree
    has ~300,000 nodes: built here it took longer than reading the samples)."""
    counts, ctx = await _counts_and_contexts(session, host_id, start, end, flt)
    merged, total, undefined = await _merged_paths(session, host_id, start, end, flt, counts)
    frames, rooted, lengths = _rooted(merged)
    return {
        "filter": flt.public(),
        "samples": total,
        "undefined_samples": undefined,
        "frames": frames,
        "paths": {"frame": rooted, "length": lengths, "samples": list(merged.values())},
        "contexts": ctx,
    }


# Bumped whenever what `flame_definitions` makes of a stack changes (frames merged otherwise, a field
# added), so definitions a console kept from an older backend are not used.
DEFINITIONS_FORMAT = 1


async def catalog_key(session: AsyncSession, host_id: str) -> str:
    """What the host's stack definitions depend on beyond their ids, as 16 hexadecimal digits: the
    definitions' format, when the host enrolled, and each module piece it has loaded with the id its first
    function got in this database (frames carry function ids, which another database numbers otherwise;
    a piece not stored yet leaves kernel frames unnamed). A console keeps definitions under the host and
    this key, so a database restored or replaced, a host enrolled again or a new kernel never shows
    definitions kept from before."""
    rows = await session.execute(
        text("""
        SELECT h.enrolled_at, m.target_id, m.name, m.digest,
               (SELECT f.id FROM functions f WHERE f.digest = m.digest ORDER BY f.index LIMIT 1) AS first_id
        FROM hosts h LEFT JOIN host_modules m ON m.host_id = h.id
        WHERE h.id = :h ORDER BY m.target_id, m.name"""),
        {"h": host_id},
    )
    h = hashlib.sha256(f"{DEFINITIONS_FORMAT}\0{host_id}".encode())
    for r in rows:
        enrolled = r.enrolled_at.isoformat() if r.enrolled_at else ""
        h.update(f"\0{enrolled}\0{r.target_id}\0{r.name}\0{r.digest}\0{r.first_id}".encode())
    return h.hexdigest()[:16]


async def flame_stacks(
    session: AsyncSession, host_id: str, start: datetime, end: datetime, flt: StackFilter, definitions: bool = False
) -> dict[str, Any]:
    """The flame graph by stack id: the filter's samples per stack that has a definition (ids as 16
    hexadecimal digits), and who the samples belong to, without any stack's frames (`flame_definitions`
    gives those, once per stack: an hour's frames were most of the flame graph's 3.5 MiB)."""
    counts, ctx = await _counts_and_contexts(session, host_id, start, end, flt)
    paths = await _PATHS.load(session, host_id, counts)
    ids, samples = [], []
    for sid, n in counts.items():
        if sid in paths:
            ids.append(f"{sid:016x}")
            samples.append(n)
    total = sum(counts.values())
    out = {
        "filter": flt.public(),
        "samples": total,
        "undefined_samples": total - sum(samples),
        "stacks": {"id": ids, "samples": samples},
        "contexts": ctx,
        "catalog": await catalog_key(session, host_id),
    }
    if definitions:  # a console that keeps none of the host's: one request instead of two
        out["definitions"] = _definitions({sid: paths[sid] for sid in counts if sid in paths})
    return out


def _definitions(paths: dict[int, bytes]) -> dict[str, Any]:
    frames, rooted, lengths = _rooted(paths.values())
    return {"frames": frames, "stacks": {"id": [f"{sid:016x}" for sid in paths], "length": lengths, "frame": rooted}}


async def flame_definitions(session: AsyncSession, host_id: str, ids: list[str]) -> dict[str, Any]:
    """The paths of these stacks (ids as `flame_stacks` gives them) that have a definition, root first,
    merged by function as the flame graph's, with the frames they use."""
    return _definitions(await _PATHS.load(session, host_id, dict.fromkeys(int(i, 16) for i in ids)))


async def flame_diff(
    session: AsyncSession,
    host_a: str,
    a: tuple[datetime, datetime],
    host_b: str,
    b: tuple[datetime, datetime],
    flt: StackFilter,
) -> dict[str, Any]:
    ma, ta, _ = await _merged_paths(session, host_a, a[0], a[1], flt)
    # Kernel frames of another host merge with A's when they name the same function of the same piece.
    mb, tb, _ = await _merged_paths(session, host_b, b[0], b[1], flt)
    tree = build_tree([ma, mb])
    frames = _local_frames(tree)
    return {
        "filter": flt.public(),
        "a_samples": ta,
        "b_samples": tb,
        "frames": frames,
        "nodes": {
            "frame": tree["frame"],
            "parent": tree["parent"],
            "a_total": tree["total"][0],
            "b_total": tree["total"][1],
            "a_self": tree["self"][0],
            "b_self": tree["self"][1],
        },
        "folded_samples": tree["folded"],
    }


# The fleet: a group's stacks ------------------------------------------------------------------------


@dataclass
class GroupStacks:
    """The stacks of some hosts (of one kernel build) over the whole minutes of a range below the minute
    watermark, read from the rollups only: their samples per distinct path (frames merged by function, as a
    host's flame graph merges them), the filter's samples and those of stacks no host of them defined, each
    host's samples, and the part of the range read ([covered_from, covered_to), None when none)."""

    paths: dict[bytes, int]
    samples: int
    undefined: int
    per_host: dict[str, int]
    covered: tuple[datetime, datetime] | None
    # What the samples were summed from: "group" (the kernel-build group's rollup, `_group_rollup`),
    # "group_less_hosts" (that less the group's other hosts' own rollups: a label that leaves out a few) or
    # "hosts" (the hosts' own rollups, when the group's rollup cannot answer for these hosts and this filter).
    rollup: str = "hosts"


def _whole_minutes(start: datetime, end: datetime, wm_1m: datetime) -> tuple[datetime, datetime] | None:
    """The whole minutes of [start, end) below the minute watermark (None when there are none)."""
    lo = start.replace(second=0, microsecond=0)
    lo = lo if lo == start else lo + _MINUTE
    hi = min(end, wm_1m).replace(second=0, microsecond=0)
    return (lo, hi) if lo < hi else None


def _range_parts(table: str, columns: str, where: str) -> str:
    """A stack rollup's rows of the range: whole ten minutes [lo10, hi10) from its ten-minute table, the
    other whole minutes [lo, lo10) and [hi10, hi) from its minute table."""
    parts = [
        f"SELECT {columns} FROM {table}_10m r WHERE {where} AND r.bucket >= :lo10 AND r.bucket < :hi10",
        f"SELECT {columns} FROM {table}_1m r WHERE {where} AND r.bucket >= :lo AND r.bucket < :lo10",
        f"SELECT {columns} FROM {table}_1m r WHERE {where} AND r.bucket >= :hi10 AND r.bucket < :hi",
    ]
    return " UNION ALL ".join(parts)


_IDLE = {"exclude": " AND NOT r.idle", "only": " AND r.idle", "include": ""}


@dataclass(frozen=True)
class GroupScope:
    """A kernel-build group asked about: its id and every host of it the fleet shows (a label filter, or a
    compare side, asks for some of them)."""

    group_id: str
    hosts: list[str]


async def _group_rollup(
    session: AsyncSession, scope: GroupScope, host_ids: list[str], flt: StackFilter, span: dict[str, datetime]
) -> tuple[dict[int, int], dict[str, int], str] | None:
    """The samples per stack id and per host of `host_ids` from the kernel-build group's rollup (migration 0020), less
    the other hosts of the group (read from their own rollups, when they are fewer than those asked), with what was
    read (`GroupStacks.rollup`); or None when it cannot answer exactly what the hosts' own rollups would: a filter
    by process, command or CPU (not in its key); parts in the range of hosts not in the group now (a host of it in
    the range has left it: another kernel, revoked) or under another group (a host of it ran another build in the
    range); parts that do not add up to the group's rows (a host of it deleted since: its samples stay in the
    group's rows until retention drops them), or the other hosts' own rollups not adding up to their parts. The
    group's rows are one per stack id and ten minutes (or minute, at the range's edges) whatever the number of
    hosts.

    With database nodes each database holds its own hosts' part of the group's rows (they are not spread by
    host): each is read over its own connection at once (`Nodes.beside`) and the parts added; the hosts'
    parts are read through the spread parents (the caller reads across the nodes)."""
    if flt.pid is not None or flt.comm is not None or flt.cpu is not None:
        return None
    wanted = set(host_ids)
    others = [h for h in scope.hosts if h not in wanted]
    if not wanted <= set(scope.hosts) or len(others) >= len(host_ids):
        return None  # reading the hosts asked costs no more than the group less the others
    idle = _IDLE[flt.idle]
    parts = _range_parts(
        "stack_host_totals", "r.host_id, r.group_id, r.count", f"(r.group_id = :g OR r.host_id = ANY(:hs)){idle}"
    )
    # One statement per database, so its parts and its group's rows are of one snapshot (rows summed in between
    # two statements would make them differ, and the read fall back for nothing): kind 0 the hosts' parts (the
    # coordinator's statement only: through the spread parents it reads every node's), 1 the group's rows per
    # stack, 2 whether the group rows are complete from the range's start.
    totals = f"""SELECT 0 AS kind, t.host_id, t.group_id, NULL::bigint AS stack_id, sum(t.count) AS n
        FROM ({parts}) t GROUP BY 2, 3"""
    rows = f"""SELECT 1 AS kind, NULL::text AS host_id, NULL::text AS group_id, u.stack_id, sum(u.count) AS n
        FROM ({_range_parts("stack_group_samples", "r.stack_id, r.count", f"r.group_id = :g{idle}")}) u GROUP BY 4"""
    since = """SELECT 2 AS kind, NULL::text AS host_id, NULL::text AS group_id, NULL::bigint AS stack_id,
        (since <= :lo)::int AS n FROM stack_group_state"""
    params = {**span, "g": scope.group_id, "hs": scope.hosts}

    async def part(conn: AsyncSession | AsyncConnection, with_totals: bool) -> list[Any]:
        sql = " UNION ALL ".join([totals, rows, since] if with_totals else [rows, since])
        return list(await conn.execute(text(sql), params))

    async def on_node(node: nodes.Node) -> list[Any]:
        async with node.engine.connect() as conn:
            return await part(conn, False)

    spread = nodes.active()
    if spread is None:
        read = await part(session, True)
    else:
        mine, theirs = await spread.beside(part(session, True), on_node, spread.nodes)
        read = [r for p in (mine, *theirs) for r in p]
    members = set(scope.hosts)
    per_host = dict.fromkeys(scope.hosts, 0)
    counts: dict[int, int] = defaultdict(int)
    for r in read:
        if r.kind == 0:
            if r.group_id != scope.group_id or r.host_id not in members:
                return None
            per_host[r.host_id] = int(r.n)
        elif r.kind == 1:
            counts[i64_to_u64(r.stack_id)] += int(r.n)
        elif not r.n:
            # A database whose stack rollups predate its group rows (a node upgraded with series: migration
            # 0020) cannot answer a range that starts before they begin.
            return None
    if sum(counts.values()) != sum(per_host.values()):
        return None
    if others:
        less, their = await _host_rollups(session, others, flt, span)
        if any(their[h] != per_host[h] for h in others):
            return None
        for sid, n in less.items():
            counts[sid] -= n
    rollup = "group_less_hosts" if others else "group"
    return {sid: n for sid, n in counts.items() if n}, {h: per_host[h] for h in host_ids}, rollup


async def group_stacks(
    session: AsyncSession,
    host_ids: list[str],
    start: datetime,
    end: datetime,
    flt: StackFilter,
    scope: GroupScope | None = None,
) -> GroupStacks:
    """A group's stacks (`GroupStacks`) from the rollups only (whole ten minutes from the ten-minute rollups, the other
    whole minutes from the minute rollups; never the raw rows: the edges of the range no rollup covers yet are left
    out, as the fleet's hot code leaves them). From the rollup of the kernel-build group `scope` (less its other
    hosts' own rollups, when fewer) when it answers for these hosts and this filter (`_group_rollup`); else in one
    statement over the hosts' own rollups, summed by Postgres per stack id over all the hosts and per host (one
    pass, two grouping sets). A stack id is the content id of its frames, so the same stack on two hosts is one id:
    its paths are read once (`StackPaths.load_shared`), and stacks whose frames differ only below the merging by
    function (offsets) are one path."""
    wm_1m, _ = await rollups.watermarks(await session.connection())
    minutes = _whole_minutes(start, end, wm_1m) if host_ids else None
    if minutes is None:
        return GroupStacks({}, 0, 0, dict.fromkeys(host_ids, 0), None)
    lo, hi = minutes
    lo10, hi10 = _whole_tens(lo, hi)
    span = {"lo": lo, "hi": hi, "lo10": lo10, "hi10": hi10}
    found = await _group_rollup(session, scope, host_ids, flt, span) if scope is not None else None
    if found is not None:
        counts, per_host, rollup = found
    else:
        counts, per_host = await _host_rollups(session, host_ids, flt, span)
        rollup = "hosts"
    paths = await _PATHS.load_shared(session, host_ids, counts)
    merged, total, undefined = _by_path(counts, paths)
    return GroupStacks(merged, total, undefined, per_host, (lo, hi), rollup)


async def _host_rollups(
    session: AsyncSession, host_ids: list[str], flt: StackFilter, span: dict[str, datetime]
) -> tuple[dict[int, int], dict[str, int]]:
    """The samples per stack id and per host from the hosts' own stack rollups, in one statement. Its sums come
    as two int8 arrays each (array_send's binary form, parsed with numpy: `binary_rows`), not a row each: a
    third of a 600-host build's hour is ~11,000 stacks, whose rows took ~50 ms of Python to read one by one."""
    where, params = flt.sql()
    columns = "r.host_id, r.stack_id, r.pid, r.comm, r.cpu, r.count AS n"
    parts = _range_parts("stack_samples", columns, "r.host_id = ANY(CAST(:hs AS text[]))")
    rows = await binary_rows(
        session,
        f"""
        WITH g AS (
            SELECT GROUPING(u.host_id) AS by_stack, u.host_id, u.stack_id, CAST(sum(u.n) AS int8) AS n
            FROM ({parts}) u WHERE true{where}
            GROUP BY GROUPING SETS ((u.stack_id), (u.host_id)))
        SELECT array_send(coalesce(array_agg(g.stack_id) FILTER (WHERE g.by_stack = 1), '{{}}')) AS ids,
               array_send(coalesce(array_agg(g.n) FILTER (WHERE g.by_stack = 1), '{{}}')) AS counts,
               coalesce(array_agg(g.host_id) FILTER (WHERE g.by_stack = 0), '{{}}') AS hosts,
               array_send(coalesce(array_agg(g.n) FILTER (WHERE g.by_stack = 0), '{{}}')) AS host_counts
        FROM g""",
        {"hs": host_ids, **span, **params},
    )
    (row,) = rows
    ids, _ = int8_arrays([row.ids])
    counts, _ = int8_arrays([row.counts])
    host_counts, _ = int8_arrays([row.host_counts])
    # zip(strict=True) raises ValueError when a pair of arrays differ in length.
    per_host = dict.fromkeys(host_ids, 0)
    per_host.update(zip(row.hosts, host_counts.tolist(), strict=True))
    # Stack ids are stored as int8: their uint64 value is the same 64 bits (models.i64_to_u64).
    return dict(zip(ids.view(np.uint64).tolist(), counts.tolist(), strict=True)), per_host


def _tree_nodes(tree: dict[str, Any], sides: list[str]) -> dict[str, Any]:
    nodes: dict[str, Any] = {"frame": tree["frame"], "parent": tree["parent"]}
    for i, side in enumerate(sides):
        nodes[f"{side}total"] = tree["total"][i]
        nodes[f"{side}self"] = tree["self"][i]
    return nodes


def group_flame(group: GroupStacks) -> dict[str, Any]:
    """A group's stacks as one tree (built here, as the differential tree is: `build_tree`), frames merged by
    function across its hosts."""
    tree = build_tree([group.paths])
    frames = _local_frames(tree)
    return {
        "samples": group.samples,
        "undefined_samples": group.undefined,
        "folded_samples": tree["folded"],
        "frames": frames,
        "nodes": _tree_nodes(tree, [""]),
    }


def group_flame_diff(a: GroupStacks, b: GroupStacks) -> dict[str, Any]:
    """Two sides of a group (hosts and ranges of their own) as one tree with both sides' samples, as a host's
    differential flame graph answers it."""
    tree = build_tree([a.paths, b.paths])
    frames = _local_frames(tree)
    return {
        "a_samples": a.samples,
        "b_samples": b.samples,
        "folded_samples": tree["folded"],
        "frames": frames,
        "nodes": _tree_nodes(tree, ["a_", "b_"]),
    }


# Functions from stacks -------------------------------------------------------------------------------


async def inclusive_by_function(
    session: AsyncSession, host_id: str, start: datetime, end: datetime, include_idle: bool
) -> tuple[dict[int, int], dict[int, int], int]:
    """Per function id: samples whose stack contains it (inclusive, once per sample however deep the
    recursion) and samples whose leaf it is (self); and the samples with a stack in the range."""
    merged, total, _ = await _merged_paths(
        session, host_id, start, end, StackFilter(idle="include" if include_idle else "exclude")
    )
    incl: dict[int, int] = defaultdict(int)
    own: dict[int, int] = defaultdict(int)
    frames = _PATHS.frames
    for packed, count in merged.items():
        path = array("I")
        path.frombytes(packed)
        seen = set()
        for fi in path:
            fid = frames[fi].function_id
            if fid is not None and fid not in seen:
                seen.add(fid)
                incl[fid] += count
        if path:
            leaf = frames[path[0]].function_id
            if leaf is not None:
                own[leaf] += count
    return dict(incl), dict(own), total


def _call_site(sites: list[tuple[int, bool]], return_offset: int) -> tuple[int, bool] | None:
    """The call instruction a return address follows: the last call site before it."""
    best = None
    for site, indirect in sites:
        if site < return_offset and (best is None or site > best[0]):
            best = (site, indirect)
    return best


async def function_calls(
    session: AsyncSession,
    host_id: str,
    digest: str,
    index: int,
    start: datetime,
    end: datetime,
    flt: StackFilter,
    sites: list[tuple[int, bool]],
) -> dict[str, Any]:
    """Callers and callees of one function from the range's stacks, and per call site (sites: its
    offsets, and whether each is indirect) the callees observed there. The stacks that contain the
    function are found through the cached paths; only those are read with their offsets."""
    counts = await _counts(session, host_id, start, end, flt)
    paths = await _PATHS.load(session, host_id, counts)
    fi = _PATHS.keys.get(("k", digest, index))
    containing = []
    if fi is not None:
        needle = array("I", [fi]).tobytes()
        for sid, packed in paths.items():
            if needle in packed:
                path = array("I")
                path.frombytes(packed)
                if fi in path:
                    containing.append(sid)
    resolver = FrameResolver()
    stacks = await resolver.resolve(session, host_id, await definitions(session, host_id, containing))
    rs = RangeStacks({sid: counts[sid] for sid in stacks}, stacks, resolver.frames, sum(counts.values()), 0)
    target = ("k", digest, index)
    inclusive = self_samples = 0
    callers: dict[int, int] = defaultdict(int)
    callees: dict[int, int] = defaultdict(int)
    at_site: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for sid, count in rs.counts.items():
        frames = rs.stacks[sid]
        positions = [i for i, (fi, _) in enumerate(frames) if rs.frames[fi].key == target]
        if not positions:
            continue
        inclusive += count
        if positions[0] == 0:
            self_samples += count
        seen_callers, seen_callees, seen_sites = set(), set(), set()
        for i in positions:
            if i + 1 < len(frames):
                seen_callers.add(frames[i + 1][0])
            if i > 0:
                callee = frames[i - 1][0]
                seen_callees.add(callee)
                hit = _call_site(sites, frames[i][1])
                if hit is not None:
                    seen_sites.add((hit[0], callee))
        for c in seen_callers:
            callers[c] += count
        for c in seen_callees:
            callees[c] += count
        for site, callee in seen_sites:
            at_site[site][callee] += count

    def listing(counter: dict[int, int]) -> list[dict[str, Any]]:
        order = sorted(counter.items(), key=lambda kv: (-kv[1], rs.frames[kv[0]].name))
        return [
            {
                "name": rs.frames[fi].name,
                "module": rs.frames[fi].module,
                "kind": rs.frames[fi].kind,
                "function_id": rs.frames[fi].function_id,
                "samples": n,
            }
            for fi, n in order
        ]

    indirect = {s for s, ind in sites if ind}
    call_sites = [
        {"site_offset": s, "indirect": s in indirect, "callees": listing(at_site[s])} for s in sorted(at_site)
    ]
    return {
        "filter": flt.public(),
        "samples": rs.total,
        "inclusive_samples": inclusive,
        "self_samples": self_samples,
        "callers": listing(callers),
        "callees": listing(callees),
        "call_sites": call_sites,
    }


# pprof ------------------------------------------------------------------------------------------


async def pprof(
    session: AsyncSession, host_id: str, start: datetime, end: datetime, flt: StackFilter, frequency_hz: int
) -> bytes:
    """The range's stacks as a gzipped pprof profile (profile.proto): one sample per (stack, pid, command,
    CPU) with values [samples, cpu nanoseconds] and labels pid, comm, cpu; a location per frame address,
    a function per kernel function (or per user address, named file+offset), a mapping per module.
    Built in one pass over the stacks' frames; kernel names and addresses are filled in afterwards with
    one query."""
    from app.protocol.proto import profile_pb  # generated from Google's profile.proto by the build

    where, params = flt.sql()
    rows = (
        await session.execute(
            text(f"""
        SELECT u.stack_id, u.pid, u.comm, u.cpu, sum(u.n) AS n {_source(where)}
        GROUP BY 1, 2, 3, 4 ORDER BY n DESC"""),
            {**await _span(session, host_id, start, end), **params},
        )
    ).all()
    defs = await definitions(session, host_id, sorted({i64_to_u64(r.stack_id) for r in rows}))
    p = profile_pb.Profile()
    strings: dict[str, int] = {}

    def s(value: str) -> int:
        i = strings.get(value)
        if i is None:
            i = strings[value] = len(p.string_table)
            p.string_table.append(value)
        return i

    s("")
    period = max(1, round(1e9 / max(1, frequency_hz)))
    p.sample_type.add(type=s("samples"), unit=s("count"))
    p.sample_type.add(type=s("cpu"), unit=s("nanoseconds"))
    p.period_type.type, p.period_type.unit, p.period = s("cpu"), s("nanoseconds"), period
    p.default_sample_type = s("cpu")
    p.time_nanos = int(start.timestamp() * 1e9)
    p.duration_nanos = int((end - start).total_seconds() * 1e9)
    p.comment.append(s(f"hotpath: host {host_id}, {start.isoformat()} to {end.isoformat()}"))

    mappings: dict[str, int] = {}
    functions: dict[FrameKey, int] = {}
    locations: dict[tuple[int, str, int, int], int] = {}
    kernel_locs: list[tuple[int, str, int, int]] = []  # (location index, digest, function index, offset)
    kernel_fns: dict[tuple[str, int], int] = {}  # (digest, index) -> function index in p.function

    def mapping(key: str, name: str) -> int:
        mid = mappings.get(key)
        if mid is None:
            mid = mappings[key] = len(p.mapping) + 1
            p.mapping.add(id=mid, filename=s(name), has_functions=True)
        return mid

    def function(key: FrameKey, name: str, module: str) -> int:
        fid = functions.get(key)
        if fid is None:
            fid = functions[key] = len(p.function) + 1
            p.function.add(id=fid, name=s(name), system_name=s(name), filename=s(module))
        return fid

    def location(kind: int, mkey: str, mname: str, fn: int, off: int) -> int:
        off &= 0xFFFFFFFFFFFFFFFF
        if kind == KERNEL_FUNCTION:
            mid = mapping(mkey, "[kernel.kallsyms]" if mname in ("", "vmlinux") else f"[{mname}]")
            fid = function(("k", mkey, fn), f"{mname or 'vmlinux'}#{fn}", mname or "vmlinux")
            kernel_fns[(mkey, fn)] = fid - 1
            kernel_locs.append((len(p.location), mkey, fn, off))
            addr = 0  # filled in below from the host's module base and the function's offset
        elif kind == USER_FILE:
            mid = mapping("u:" + mkey, mkey)
            fid = function(("u", mkey, off), f"{os.path.basename(mkey) or mkey}+{off:#x}", mkey)
            addr = off
        else:
            name = "[kernel]" if kind == KERNEL_ADDRESS else "[unknown]"
            mid = mapping(name, name)
            fid = function(("a", off), f"{off:#x}", name)
            addr = off
        loc = p.location.add(id=len(p.location) + 1, mapping_id=mid, address=addr)
        loc.line.add(function_id=fid)
        return int(loc.id)

    stack_locs: dict[int, list[int]] = {}
    for sid, (modules, flat) in defs.items():
        out = []
        for k in range(0, len(flat), 3):
            mi, fn, off = flat[k], flat[k + 1], flat[k + 2]
            kind, mkey, mname = modules[mi] if 0 <= mi < len(modules) else (USER_ADDRESS, "", "")
            key = (kind, mkey, fn, off)
            lid = locations.get(key)
            if lid is None:
                lid = locations[key] = location(kind, mkey, mname, fn, off)
            out.append(lid)
        stack_locs[sid] = out

    # Kernel functions' names, and their locations' addresses on this host.
    if kernel_fns:
        bases = {
            r.digest: i64_to_u64(r.base_address)
            for r in await session.execute(
                text("SELECT digest, base_address FROM host_modules WHERE host_id = :h"), {"h": host_id}
            )
        }
        ds, ix = zip(*kernel_fns, strict=True)
        found: dict[tuple[str, int], int] = {}
        for r in await session.execute(
            text("""
                SELECT f.digest, f.index AS fn_index, f."offset", f.name FROM functions f
                JOIN unnest(CAST(:d AS text[]), CAST(:i AS int[])) AS q(d, i) ON f.digest = q.d AND f.index = q.i"""),
            {"d": list(ds), "i": list(ix)},
        ):
            found[(r.digest, r.fn_index)] = r.offset
            f = p.function[kernel_fns[(r.digest, r.fn_index)]]
            f.name = f.system_name = s(r.name)
        for li, digest, fn, off in kernel_locs:
            p.location[li].address = (bases.get(digest, 0) + found.get((digest, fn), 0) + off) & 0xFFFFFFFFFFFFFFFF
        for digest, mid in mappings.items():
            if digest in bases:
                p.mapping[mid - 1].memory_start = bases[digest]
                hi = max((p.location[li].address for li, d, _, _ in kernel_locs if d == digest), default=bases[digest])
                p.mapping[mid - 1].memory_limit = hi + 1
    for m in p.mapping:
        if not m.memory_limit:
            m.memory_limit = 0xFFFFFFFFFFFFFFFF

    k_pid, k_comm, k_cpu = s("pid"), s("comm"), s("cpu")
    for r in rows:
        locs = stack_locs.get(i64_to_u64(r.stack_id))
        if not locs:
            continue
        n = int(r.n)
        sample = p.sample.add(location_id=locs, value=[n, n * period])
        sample.label.add(key=k_pid, num=r.pid)
        sample.label.add(key=k_comm, str=s(r.comm))
        sample.label.add(key=k_cpu, num=r.cpu)
    return gzip.compress(p.SerializeToString(), compresslevel=6, mtime=0)
