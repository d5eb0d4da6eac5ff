# SPDX-License-Identifier: Apache-2.0
"""A host's functions: the searchable, sortable page over the whole catalog, one function's detail
(blocks, successors, callers), cached disassemblies and the offsets probes patch.

The hot read paths (whole-kernel function lists, detail) are single SQL statements returning plain rows
and dicts, not ORM objects: a kernel has ~120k functions and the console may ask for all of them at once.
The sample series is read through `app.storage.samples` only.
"""

from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession

from app.storage import samples
from app.storage.models import hex64, i64_to_u64

_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
SUCCESSOR_KINDS = {1: "fallthrough", 2: "taken", 3: "tail_call", 4: "indirect", 5: "return"}
_SIGN_FLIP = "(-9223372036854775808)::bigint"


def _like_pattern(q: str) -> str:
    return "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


_SORTS = {
    "name": "f.name, f.id",
    "address": f'((hm.base_address + f."offset") # {_SIGN_FLIP}), f.id',
    "hotness": "coalesce(hot.s, 0) DESC, f.name, f.id",
    "blocks": "f.block_count DESC, f.name, f.id",
}


async def functions_page(
    session: AsyncSession,
    host_id: str,
    q: str | None,
    module: str | None,
    sort: str,
    spec: samples.RangeSpec,
    offset: int,
    limit: int,
    target_id: str = "kernel",
) -> bytes:
    """One page of a host's functions as a ready JSON document (FunctionsPage).

    Postgres builds the JSON itself: for a whole kernel (~120k rows) that is several times faster than
    materialising rows in Python, and the hex twins come from to_hex(), which prints a negative
    BIGINT as its 64-bit two's complement — exactly the unsigned address."""
    r = await samples.resolve(session, host_id, spec) if target_id == "kernel" else None
    hot_cte, hot_params = await samples.function_totals_sql(session, r)
    where = ["hm.host_id = :h", "hm.target_id = :target"]
    params: dict[str, Any] = {
        "h": host_id,
        "target": target_id,
        "limit": limit,
        "offset": offset,
        "w": r.seconds if r else float(spec.window_s or 1),
        **hot_params,
    }
    order = _SORTS[sort]
    if q:
        where.append("f.name_lc LIKE :pat")
        params["pat"] = _like_pattern(q.lower())
        params["q"] = q.lower()
        order = "(f.name_lc = :q) DESC, " + order
    if module:
        where.append("hm.name = :module")
        params["module"] = module
    sql = f"""
        WITH hot AS ({hot_cte}),
        page AS (
            SELECT f.id, f.name, hm.name AS module, f.digest, f.index,
                   CASE WHEN hm.base_address + f."offset" < 0
                        THEN (hm.base_address + f."offset")::numeric + 18446744073709551616
                        ELSE (hm.base_address + f."offset")::numeric END AS address,
                   to_hex(hm.base_address + f."offset") AS address_hex, f.size, f.block_count,
                   coalesce(hot.s, 0)::float8 / :w AS samples_per_sec, f.undecodable,
                   count(*) OVER () AS total
            FROM functions f
            JOIN host_modules hm ON hm.digest = f.digest
            LEFT JOIN hot ON hot.function_id = f.id
            WHERE {" AND ".join(where)}
            ORDER BY {order}
            OFFSET :offset LIMIT :limit)
        SELECT (SELECT coalesce(max(total), 0) FROM page) AS total,
               (SELECT coalesce(json_agg(item), '[]'::json)::text FROM
                   (SELECT id, name, module, digest, index, address, address_hex, size, block_count,
                           samples_per_sec, undecodable FROM page) AS item) AS items"""
    row = (await session.execute(text(sql), params)).one()
    total = row.total
    if total == 0 and offset > 0:
        count_sql = (
            f"SELECT count(*) FROM functions f JOIN host_modules hm ON hm.digest = f.digest WHERE {' AND '.join(where)}"
        )
        total = (await session.execute(text(count_sql), params)).scalar_one()
    return b'{"total":%d,"items":%s}' % (int(total), row.items.encode())


# A row or None, typed Any: its column `index` would read as the tuple method Row.index.
async def get_host_function(session: AsyncSession, host_id: str, function_id: int, target_id: str = "kernel") -> Any:
    """The function with this id if it belongs to one of the modules of the host's target, with its module
    placement there (one binary mapped by two processes is loaded at two addresses)."""
    return (
        await session.execute(
            text("""
        SELECT f.id, f.digest, f.index, f.name, f."offset", f.size, f.block_count, f.undecodable,
               f.undecodable_offset, hm.name AS module, hm.base_address, hm.target_id
        FROM functions f JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :h AND hm.target_id = :t
        WHERE f.id = :fid"""),
            {"h": host_id, "fid": function_id, "t": target_id},
        )
    ).first()


def summary_from_row(r: Row[Any], samples_per_sec: float) -> dict[str, Any]:
    base = i64_to_u64(r.base_address)
    addr = (base + r.offset) & 0xFFFFFFFFFFFFFFFF
    return {
        "id": r.id,
        "name": r.name,
        "module": r.module,
        "digest": r.digest,
        "index": r.index,
        "address": addr,
        "address_hex": hex64(addr),
        "size": r.size,
        "block_count": r.block_count,
        "samples_per_sec": samples_per_sec,
        "undecodable": r.undecodable,
    }


async def function_detail(
    session: AsyncSession, host_id: str, function_id: int, spec: samples.RangeSpec, target_id: str = "kernel"
) -> dict[str, Any] | None:
    fn = await get_host_function(session, host_id, function_id, target_id)
    if fn is None:
        return None
    rate = await samples.function_rate(session, host_id, function_id, spec) if target_id == "kernel" else 0.0
    summary = summary_from_row(fn, rate)
    code = (
        await session.execute(
            text("""
        SELECT blocks, calls, indirect_call_sites FROM function_code WHERE digest = :d AND index = :i"""),
            {"d": fn.digest, "i": fn.index},
        )
    ).first()
    blocks_raw = code.blocks if code else []
    calls_raw = code.calls if code else []
    base = i64_to_u64(fn.base_address)
    start = summary["address"]

    # Resolve targets outside the function: first as a function of this module at that offset (exact,
    # and immune to duplicate static names), then by name in any of the host's modules.
    # A named target outside the module (or not checked against the piece) is stored without an address
    # (app.storage.catalog.TargetCheck): it is found by name only.
    rel_targets = {s[1] for b in blocks_raw for s in b[3] if s[0] == 3 and isinstance(s[1], int)}
    rel_targets |= {c[1] for c in calls_raw if isinstance(c[1], int)}
    by_offset: dict[int, tuple[int, str]] = {}
    if rel_targets:
        rows = await session.execute(
            text("""
            SELECT id, "offset", name FROM functions WHERE digest = :d AND "offset" = ANY(:offs)"""),
            {"d": fn.digest, "offs": [t for t in rel_targets if -(1 << 63) <= t < (1 << 63)]},
        )
        for r in rows:
            by_offset.setdefault(r.offset, (r.id, r.name))
    names = {s[2] for b in blocks_raw for s in b[3] if s[0] == 3 and s[2]} | {c[2] for c in calls_raw if c[2]}
    by_name: dict[str, tuple[int, int, str]] = {}
    if names:
        rows = await session.execute(
            text("""
            SELECT DISTINCT ON (f.name) f.name, f.id, hm.base_address + f."offset" AS address, hm.name AS module
            FROM functions f JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :h AND hm.target_id = :t
            WHERE f.name = ANY(:names) ORDER BY f.name, hm.position, f.id"""),
            {"h": host_id, "names": list(names), "t": target_id},
        )
        for r in rows:
            by_name[r.name] = (r.id, i64_to_u64(r.address), r.module)

    def resolve(rel: int | None, name: str) -> tuple[int | None, int | None, str | None, str | None]:
        hit = by_offset.get(rel) if rel is not None else None
        if rel is not None and hit is not None and (not name or hit[1] == name):
            return (base + rel) & 0xFFFFFFFFFFFFFFFF, hit[0], hit[1], fn.module
        if name and name in by_name:
            fid, addr, module = by_name[name]
            return addr, fid, name, module
        if rel is None:
            return None, None, name or None, None
        return (base + rel) & 0xFFFFFFFFFFFFFFFF, None, name or None, None

    blocks = []
    for entry in blocks_raw:
        try:
            off, size, icount, succs = entry
            succs = [(int(k), None if t is None else int(t), str(n)) for k, t, n in succs]
            off, size, icount = int(off) & _U32, int(size) & _U32, int(icount) & _U32
        except (TypeError, ValueError):
            continue  # a malformed stored block (never written by this version): skip, do not fail the page
        out_succ = []
        for kind, target, tname in succs:
            kind_name = SUCCESSOR_KINDS.get(kind, "indirect")
            if kind_name in ("fallthrough", "taken"):
                if target is None:
                    continue  # never written so: skip the edge, do not fail the page
                target &= _U32
                addr = (start + target) & _U64
                out_succ.append(
                    {
                        "kind": kind_name,
                        "target_offset": target,
                        "target_address": addr,
                        "target_address_hex": hex64(addr),
                        "target_name": None,
                        "target_function_id": None,
                    }
                )
            elif kind_name == "tail_call":
                addr, fid, rname, _ = resolve(target, tname)
                out_succ.append(
                    {
                        "kind": kind_name,
                        "target_offset": None,
                        "target_address": addr,
                        "target_address_hex": None if addr is None else hex64(addr),
                        "target_name": rname,
                        "target_function_id": fid,
                    }
                )
            else:
                out_succ.append(
                    {
                        "kind": kind_name,
                        "target_offset": None,
                        "target_address": None,
                        "target_address_hex": None,
                        "target_name": None,
                        "target_function_id": None,
                    }
                )
        addr = (start + off) & _U64
        blocks.append(
            {
                "offset": off,
                "address": addr,
                "address_hex": hex64(addr),
                "size": size,
                "instruction_count": icount,
                "successors": out_succ,
            }
        )
    callees = []
    for call in calls_raw:
        try:
            site, tname, tmodule = int(call[0]) & _U32, str(call[2]), str(call[3])
            rel = None if call[1] is None else int(call[1])
        except (TypeError, ValueError, IndexError):
            continue
        addr, fid, rname, rmodule = resolve(rel, tname)
        callees.append(
            {
                "site_offset": site,
                "target_address": addr,
                "target_address_hex": None if addr is None else hex64(addr),
                "name": rname,
                "module": rmodule or tmodule or None,
                "function_id": fid,
            }
        )
    return {
        "function": summary,
        "undecodable_offset": fn.undecodable_offset if fn.undecodable else None,
        "blocks": blocks,
        "callees": callees,
        "indirect_call_sites": [int(x) & _U32 for x in code.indirect_call_sites if isinstance(x, int)] if code else [],
    }


async def call_sites(session: AsyncSession, digest: str, index: int) -> list[tuple[int, bool]]:
    """A function's call sites: (offset of the call instruction, whether it is indirect)."""
    row = (
        await session.execute(
            text("""
        SELECT calls, indirect_call_sites FROM function_code WHERE digest = :d AND index = :i"""),
            {"d": digest, "i": index},
        )
    ).first()
    if row is None:
        return []
    sites = [(int(c[0]) & _U32, False) for c in row.calls if isinstance(c, list) and c and isinstance(c[0], int)]
    sites += [(int(x) & _U32, True) for x in row.indirect_call_sites if isinstance(x, int)]
    return sites


async def cached_instructions(session: AsyncSession, digest: str, index: int) -> list[Any] | None:
    return (
        await session.execute(
            text("SELECT instructions FROM instruction_cache WHERE digest = :d AND index = :i"),
            {"d": digest, "i": index},
        )
    ).scalar_one_or_none()


# Mechanisms that put a breakpoint into the code they count: a uprobe (or uretprobe: both trap at the
# function's entry) writes int3 into a process's text, a kprobe into the kernel's.
_PROBE_MECHANISMS = ("uprobe", "uprobe_multi", "uretprobe", "uretprobe_multi", "kprobe", "kretprobe")


async def probe_offsets(session: AsyncSession, host_id: str, target: str, digest: str, index: int) -> list[int]:
    """Where a probe sits in a function now: the offsets (from its start) of the entries and block starts
    its host's armed or running measurements of this target count with a breakpoint mechanism. Live state,
    never cached with the instructions (a probe is not the program's code)."""
    rows = await session.execute(
        text("""
        SELECT DISTINCT CASE WHEN r.kind = 'block' THEN r.block_offset ELSE 0 END
        FROM measurement_resources r JOIN measurements m ON m.id = r.measurement_id
        WHERE m.host_id = :h AND m.target_id = :t AND m.state IN ('armed', 'running')
          AND r.digest = :d AND r.function_index = :i
          AND EXISTS (SELECT 1 FROM jsonb_each(r.metrics) e, unnest(string_to_array(e.value->>'mechanism', '+')) mech
                      WHERE (e.value->>'available')::boolean AND mech = ANY(:mechs))"""),
        {"h": host_id, "t": target, "d": digest, "i": index, "mechs": list(_PROBE_MECHANISMS)},
    )
    return sorted(int(r[0]) for r in rows if r[0] is not None)
