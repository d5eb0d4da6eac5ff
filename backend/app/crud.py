# SPDX-License-Identifier: Apache-2.0
"""Reads and writes used by the routes and the agent service.

The hot read paths (whole-kernel function lists, detail, sample windows) are single SQL statements
returning plain rows and dicts, not ORM objects: a kernel has ~120k functions and the console may ask
for all of them at once. Sample windows are measured against the newest interval the host reported,
never against this server's clock, so a host whose clock differs from ours still shows its data.
"""
import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.security import hash_password
from app.models import AuditLog, Host, User, i64_to_u64
from app.schemas import hex64

_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
SUCCESSOR_KINDS = {1: "fallthrough", 2: "taken", 3: "tail_call", 4: "indirect", 5: "return"}
_SIGN_FLIP = "(-9223372036854775808)::bigint"


# Users and audit ---------------------------------------------------------------------------------

async def get_user_by_username(session: AsyncSession, username: str) -> User | None:
    return (await session.execute(select(User).where(User.username == username))).scalar_one_or_none()


async def get_user(session: AsyncSession, user_id: uuid.UUID) -> User | None:
    return await session.get(User, user_id)


async def create_user(session: AsyncSession, username: str, password: str, role: str) -> User:
    user = User(id=uuid.uuid4(), username=username, password_hash=hash_password(password), role=role)
    session.add(user)
    await session.flush()
    return user


async def list_users(session: AsyncSession) -> list[User]:
    return list((await session.execute(select(User).order_by(User.username))).scalars())


def audit(session: AsyncSession, actor: str, action: str, target: str | None = None,
          detail: dict[str, Any] | None = None) -> None:
    session.add(AuditLog(actor=actor, action=action, target=target, detail=detail or {}))


async def list_audit(session: AsyncSession, limit: int, action: str | None) -> list[AuditLog]:
    stmt = select(AuditLog).order_by(AuditLog.id.desc()).limit(limit)
    if action:
        stmt = stmt.where(AuditLog.action == action)
    return list((await session.execute(stmt)).scalars())


# Hosts -------------------------------------------------------------------------------------------

_HOST_SQL = """
SELECT h.*, count(hm.name) AS module_count,
       coalesce(bool_and(coalesce(cp.complete, false)), false) AS all_complete,
       coalesce(sum(hm.function_count), 0) AS fn_count, coalesce(sum(hm.block_count), 0) AS blk_count
FROM hosts h
LEFT JOIN host_modules hm ON hm.host_id = h.id
LEFT JOIN catalog_pieces cp ON cp.digest = hm.digest
{where}
GROUP BY h.id
ORDER BY h.hostname, h.id
"""


_skew_ms = 120_000  # set from the settings by set_clock_skew


def set_clock_skew(seconds: float) -> None:
    global _skew_ms
    _skew_ms = int(seconds * 1000)


def _host_public(row) -> dict[str, Any]:
    m = row._mapping
    l1i = m["l1i"]
    return {
        "id": m["id"], "hostname": m["hostname"], "kernel_release": m["kernel_release"],
        "kernel_build_id": m["kernel_build_id"], "cpu_model": m["cpu_model"], "cpu_count": m["cpu_count"],
        "l1i": l1i if l1i else None, "capabilities": m["capabilities"] or [],
        "agent_version": m["agent_version"], "online": m["online"], "last_seen": m["last_seen"],
        "connected_at": m["connected_at"],
        "catalog_complete": bool(m["module_count"] and m["all_complete"]),
        "function_count": int(m["fn_count"]), "block_count": int(m["blk_count"]),
        "sample_frequency_hz": m["sample_frequency_hz"], "sample_event": m["sample_event"],
        "status": m["status"], "enrolled": m["cert_fingerprint"] is not None, "cert_not_after": m["cert_not_after"],
        "replica": m["replica"], "clock_offset_ms": m["clock_offset_ms"],
        "clock_skewed": m["clock_offset_ms"] is not None and abs(m["clock_offset_ms"]) > _skew_ms,
        "refused_batches": int(m["refused_batches"]),
    }


async def list_hosts(session: AsyncSession) -> list[dict[str, Any]]:
    rows = await session.execute(text(_HOST_SQL.format(where="")))
    return [_host_public(r) for r in rows]


async def get_host_public(session: AsyncSession, host_id: str) -> dict[str, Any] | None:
    rows = (await session.execute(text(_HOST_SQL.format(where="WHERE h.id = :h")), {"h": host_id})).all()
    return _host_public(rows[0]) if rows else None


async def host_exists(session: AsyncSession, host_id: str) -> bool:
    return (await session.get(Host, host_id)) is not None


async def list_modules(session: AsyncSession, host_id: str) -> list[dict[str, Any]]:
    rows = await session.execute(text("""
        SELECT hm.name, hm.digest, hm.base_address, hm.function_count, hm.block_count,
               coalesce(cp.complete, false) AS complete
        FROM host_modules hm LEFT JOIN catalog_pieces cp ON cp.digest = hm.digest
        WHERE hm.host_id = :h ORDER BY hm.position, hm.name"""), {"h": host_id})
    out = []
    for r in rows:
        base = i64_to_u64(r.base_address)
        out.append({"name": r.name, "digest": r.digest, "base_address": base, "base_address_hex": hex64(base),
                    "function_count": r.function_count, "block_count": r.block_count, "complete": r.complete})
    return out


# Sample windows ----------------------------------------------------------------------------------

async def window_start(session: AsyncSession, host_id: str, window_s: int) -> datetime | None:
    """Start of the last `window_s` seconds of this host's samples, by the host's interval clock."""
    row = (await session.execute(text("""
        SELECT ts, interval_ms FROM interval_totals WHERE host_id = :h ORDER BY ts DESC LIMIT 1"""),
        {"h": host_id})).first()
    if row is None:
        return None
    end = row.ts + timedelta(milliseconds=row.interval_ms)
    return end - timedelta(seconds=window_s)


# Functions ---------------------------------------------------------------------------------------

def _like_pattern(q: str) -> str:
    return "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


_SORTS = {
    "name": "f.name, f.id",
    "address": f"((hm.base_address + f.\"offset\") # {_SIGN_FLIP}), f.id",
    "hotness": "coalesce(hot.s, 0) DESC, f.name, f.id",
}


async def functions_page(session: AsyncSession, host_id: str, q: str | None, module: str | None, sort: str,
                         window_s: int, offset: int, limit: int) -> bytes:
    """One page of a host's functions as a ready JSON document (FunctionsPage).

    Postgres builds the JSON itself: for a whole kernel (~120k rows) that is several times faster than
    materialising rows in Python, and the hex twins come from to_hex(), which prints a negative
    BIGINT as its 64-bit two's complement — exactly the unsigned address."""
    start = await window_start(session, host_id, window_s)
    where = ["hm.host_id = :h"]
    params: dict[str, Any] = {"h": host_id, "limit": limit, "offset": offset, "start": start, "w": float(window_s)}
    order = _SORTS[sort]
    if q:
        where.append("f.name_lc LIKE :pat")
        params["pat"] = _like_pattern(q.lower())
        params["q"] = q.lower()
        order = "(f.name_lc = :q) DESC, " + order
    if module:
        where.append("hm.name = :module")
        params["module"] = module
    hot_cte = ("SELECT function_id, sum(count) AS s FROM block_samples WHERE host_id = :h AND ts >= :start "
               "GROUP BY function_id") if start is not None else \
        "SELECT NULL::bigint AS function_id, 0::numeric AS s WHERE false"
    sql = f"""
        WITH hot AS ({hot_cte}),
        page AS (
            SELECT f.id, f.name, hm.name AS module,
                   CASE WHEN hm.base_address + f."offset" < 0
                        THEN (hm.base_address + f."offset")::numeric + 18446744073709551616
                        ELSE (hm.base_address + f."offset")::numeric END AS address,
                   to_hex(hm.base_address + f."offset") AS address_hex, f.size, f.block_count,
                   coalesce(hot.s, 0)::float8 / :w AS samples_per_sec, f.undecodable,
                   count(*) OVER () AS total
            FROM functions f
            JOIN host_modules hm ON hm.digest = f.digest
            LEFT JOIN hot ON hot.function_id = f.id
            WHERE {' AND '.join(where)}
            ORDER BY {order}
            OFFSET :offset LIMIT :limit)
        SELECT (SELECT coalesce(max(total), 0) FROM page) AS total,
               (SELECT coalesce(json_agg(item), '[]'::json)::text FROM
                   (SELECT id, name, module, address, address_hex, size, block_count, samples_per_sec,
                           undecodable FROM page) AS item) AS items"""
    row = (await session.execute(text(sql), params)).one()
    total = row.total
    if total == 0 and offset > 0:
        count_sql = ("SELECT count(*) FROM functions f JOIN host_modules hm ON hm.digest = f.digest "
                     f"WHERE {' AND '.join(where)}")
        total = (await session.execute(text(count_sql), params)).scalar_one()
    return b'{"total":%d,"items":%s}' % (int(total), row.items.encode())


async def get_host_function(session: AsyncSession, host_id: str, function_id: int):
    """The function with this id if it belongs to one of the host's modules, with its module placement."""
    return (await session.execute(text("""
        SELECT f.id, f.digest, f.index, f.name, f."offset", f.size, f.block_count, f.undecodable,
               f.undecodable_offset, hm.name AS module, hm.base_address
        FROM functions f JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :h
        WHERE f.id = :fid"""), {"h": host_id, "fid": function_id})).first()


async def function_rate(session: AsyncSession, host_id: str, function_id: int, window_s: int) -> float:
    start = await window_start(session, host_id, window_s)
    if start is None:
        return 0.0
    s = (await session.execute(text("""
        SELECT coalesce(sum(count), 0) FROM block_samples
        WHERE host_id = :h AND function_id = :fid AND ts >= :start"""),
        {"h": host_id, "fid": function_id, "start": start})).scalar_one()
    return float(s) / window_s


def summary_from_row(r, samples_per_sec: float) -> dict[str, Any]:
    base = i64_to_u64(r.base_address)
    addr = (base + r.offset) & 0xFFFFFFFFFFFFFFFF
    return {"id": r.id, "name": r.name, "module": r.module, "address": addr, "address_hex": hex64(addr),
            "size": r.size, "block_count": r.block_count, "samples_per_sec": samples_per_sec,
            "undecodable": r.undecodable}


async def function_detail(session: AsyncSession, host_id: str, function_id: int,
                          window_s: int = 10) -> dict[str, Any] | None:
    fn = await get_host_function(session, host_id, function_id)
    if fn is None:
        return None
    summary = summary_from_row(fn, await function_rate(session, host_id, function_id, window_s))
    code = (await session.execute(text("""
        SELECT blocks, calls, indirect_call_sites FROM function_code WHERE digest = :d AND index = :i"""),
        {"d": fn.digest, "i": fn.index})).first()
    blocks_raw = code.blocks if code else []
    calls_raw = code.calls if code else []
    base = i64_to_u64(fn.base_address)
    start = summary["address"]

    # Resolve targets outside the function: first as a function of this module at that offset (exact,
    # and immune to duplicate static names), then by name in any of the host's modules.
    rel_targets = {s[1] for b in blocks_raw for s in b[3] if s[0] == 3}
    rel_targets |= {c[1] for c in calls_raw}
    by_offset: dict[int, tuple[int, str]] = {}
    if rel_targets:
        rows = await session.execute(text("""
            SELECT id, "offset", name FROM functions WHERE digest = :d AND "offset" = ANY(:offs)"""),
            {"d": fn.digest, "offs": [t for t in rel_targets if -(1 << 63) <= t < (1 << 63)]})
        for r in rows:
            by_offset.setdefault(r.offset, (r.id, r.name))
    names = {s[2] for b in blocks_raw for s in b[3] if s[0] == 3 and s[2]} | {c[2] for c in calls_raw if c[2]}
    by_name: dict[str, tuple[int, int, str]] = {}
    if names:
        rows = await session.execute(text("""
            SELECT DISTINCT ON (f.name) f.name, f.id, hm.base_address + f."offset" AS address, hm.name AS module
            FROM functions f JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :h
            WHERE f.name = ANY(:names) ORDER BY f.name, hm.position, f.id"""), {"h": host_id, "names": list(names)})
        for r in rows:
            by_name[r.name] = (r.id, i64_to_u64(r.address), r.module)

    def resolve(rel: int, name: str) -> tuple[int, int | None, str | None, str | None]:
        hit = by_offset.get(rel)
        if hit is not None and (not name or hit[1] == name):
            return (base + rel) & 0xFFFFFFFFFFFFFFFF, hit[0], hit[1], fn.module
        if name and name in by_name:
            fid, addr, module = by_name[name]
            return addr, fid, name, module
        return (base + rel) & 0xFFFFFFFFFFFFFFFF, None, name or None, None

    blocks = []
    for entry in blocks_raw:
        try:
            off, size, icount, succs = entry
            succs = [(int(k), int(t), str(n)) for k, t, n in succs]
            off, size, icount = int(off) & _U32, int(size) & _U32, int(icount) & _U32
        except (TypeError, ValueError):
            continue  # a malformed stored block (never written by this version): skip, do not fail the page
        out_succ = []
        for kind, target, tname in succs:
            kind_name = SUCCESSOR_KINDS.get(kind, "indirect")
            if kind_name in ("fallthrough", "taken"):
                target &= _U32
                addr = (start + target) & _U64
                out_succ.append({"kind": kind_name, "target_offset": target, "target_address": addr,
                                 "target_address_hex": hex64(addr), "target_name": None,
                                 "target_function_id": None})
            elif kind_name == "tail_call":
                addr, fid, rname, _ = resolve(target, tname)
                out_succ.append({"kind": kind_name, "target_offset": None, "target_address": addr,
                                 "target_address_hex": hex64(addr), "target_name": rname,
                                 "target_function_id": fid})
            else:
                out_succ.append({"kind": kind_name, "target_offset": None, "target_address": None,
                                 "target_address_hex": None, "target_name": None, "target_function_id": None})
        addr = (start + off) & _U64
        blocks.append({"offset": off, "address": addr, "address_hex": hex64(addr), "size": size,
                       "instruction_count": icount, "successors": out_succ})
    callees = []
    for call in calls_raw:
        try:
            site, rel, tname, tmodule = int(call[0]) & _U32, int(call[1]), str(call[2]), str(call[3])
        except (TypeError, ValueError, IndexError):
            continue
        addr, fid, rname, rmodule = resolve(rel, tname)
        callees.append({"site_offset": site, "target_address": addr, "target_address_hex": hex64(addr),
                        "name": rname, "module": rmodule or tmodule or None, "function_id": fid})
    return {"function": summary,
            "undecodable_offset": fn.undecodable_offset if fn.undecodable else None,
            "blocks": blocks, "callees": callees,
            "indirect_call_sites": [int(x) & _U32 for x in code.indirect_call_sites
                                    if isinstance(x, int)] if code else []}


async def function_samples(session: AsyncSession, host_id: str, function_id: int, window_s: int) -> dict[str, Any]:
    start = await window_start(session, host_id, window_s)
    blocks = []
    total = 0
    if start is not None:
        rows = await session.execute(text("""
            SELECT block_offset, sum(count) AS s FROM block_samples
            WHERE host_id = :h AND function_id = :fid AND ts >= :start
            GROUP BY block_offset ORDER BY block_offset"""), {"h": host_id, "fid": function_id, "start": start})
        for r in rows:
            total += int(r.s)
            blocks.append({"offset": r.block_offset, "samples": int(r.s), "samples_per_sec": float(r.s) / window_s})
    return {"function_id": function_id, "window_s": window_s, "total": total, "blocks": blocks}


async def top_functions(session: AsyncSession, host_id: str, window_s: int, limit: int) -> dict[str, Any]:
    start = await window_start(session, host_id, window_s)
    if start is None:
        return {"window_s": window_s, "total_samples": 0, "items": []}
    total = (await session.execute(text("""
        SELECT coalesce(sum(total_samples), 0) FROM interval_totals WHERE host_id = :h AND ts >= :start"""),
        {"h": host_id, "start": start})).scalar_one()
    rows = await session.execute(text("""
        WITH hot AS (SELECT function_id, sum(count) AS s FROM block_samples
                     WHERE host_id = :h AND ts >= :start GROUP BY function_id)
        SELECT hot.function_id, hot.s, f.name, coalesce(hm.name, '') AS module
        FROM hot JOIN functions f ON f.id = hot.function_id
        LEFT JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :h
        ORDER BY hot.s DESC, f.name LIMIT :limit"""), {"h": host_id, "start": start, "limit": limit})
    items = []
    for r in rows:
        s = int(r.s)
        items.append({"function_id": r.function_id, "name": r.name, "module": r.module, "samples": s,
                      "samples_per_sec": s / window_s, "share": (s / int(total)) if total else 0.0})
    return {"window_s": window_s, "total_samples": int(total), "items": items}


async def hotness(session: AsyncSession, host_id: str, window_s: int) -> dict[str, Any]:
    start = await window_start(session, host_id, window_s)
    items = []
    if start is not None:
        rows = await session.execute(text("""
            SELECT function_id, sum(count) AS s FROM block_samples
            WHERE host_id = :h AND ts >= :start GROUP BY function_id ORDER BY s DESC"""),
            {"h": host_id, "start": start})
        items = [{"function_id": r.function_id, "samples_per_sec": float(r.s) / window_s} for r in rows]
    return {"window_s": window_s, "items": items}


async def cached_instructions(session: AsyncSession, digest: str, index: int) -> list | None:
    return (await session.execute(text("SELECT instructions FROM instruction_cache WHERE digest = :d AND index = :i"),
                                  {"d": digest, "i": index})).scalar_one_or_none()


async def count_users(session: AsyncSession) -> int:
    return (await session.execute(select(func.count()).select_from(User))).scalar_one()


async def timeline(session: AsyncSession, host_id: str, window_s: int, buckets: int) -> dict[str, Any]:
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
