# SPDX-License-Identifier: Apache-2.0
"""Storing catalog pieces sent by agents.

A piece arrives as ordered chunks of functions; each chunk is written with COPY into `functions`
(searchable columns) and `function_code` (blocks, successors and calls as compact JSON). Addresses of
tail-call and call targets arrive absolute for the sending host and are stored relative to the
module's base there, so every host of the same build (each with its own KASLR slide) can use them.
Only addresses the digest vouches for are kept (TargetCheck): a named target in the piece's own module
is checked against the function it names, any other named target is stored without an address.

Until a piece is verified (all chunks in order, function and block counts as announced, digest
recomputed from the content) its rows live under a staging key of its own, which no host's module
refers to: nobody sees them, and a piece that fails is deleted whole. Verification moves the rows to
the real digest in one transaction; a piece that another upload completed first is simply dropped.
"""

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app.protocol.catalog_digest import split_target_name
from app.protocol.proto import pb

_MASK = (1 << 64) - 1


def _signed(value: int) -> int:
    value &= _MASK
    return value - (1 << 64) if value >= (1 << 63) else value


@dataclass
class TargetCheck:
    """The named targets (calls and tail calls) of one upload, checked against the piece's own functions.

    The digest covers a named target as (module, function, offset into it), not its address, so the
    address an agent sends is kept only where the backend can check it: a target in the piece's own
    module whose function the piece holds must lie at that function's start plus the offset (else the
    piece is refused); any other named target (another module, whose placement is the sending host's,
    or a name the piece does not hold) is stored without an address and resolved by name when read.
    Unnamed targets are covered by the digest through their address."""

    module: str
    starts: dict[str, list[int]] = field(default_factory=dict)  # function name -> its offsets in the piece
    # (function, offset into it, the agent's address relative to the module base, function index, JSON
    # column, path of the address in that column)
    pending: list[tuple[str, int, int, int, str, list[str]]] = field(default_factory=list)


def _target(
    check: TargetCheck, base: int, target: int, name: str, module: str, index: int, column: str, path: list[str]
) -> int | None:
    """The address to store for one call or tail-call target (relative to the module base), or None."""
    if not name:
        return _signed(target - base)
    if module != check.module:
        return None
    split = split_target_name(name)
    fname, off = split if split is not None else (name, 0)
    rel = _signed(target - base)
    check.pending.append((fname, off, rel, index, column, path))
    return rel


# (functions row, function_code row, block count)
FunctionRows = tuple[tuple[str, int, str, int, int, int, bool, int], tuple[str, int, str, str, str], int]


def function_rows(
    digest: str, base: int, functions: Iterable["pb.Function"], check: TargetCheck
) -> Iterator[FunctionRows]:
    """Yield (functions row, function_code row, block count) per function of a chunk; named targets are
    stored as TargetCheck says and noted for its verification when the piece is complete."""
    tail_call = pb.SUCCESSOR_KIND_TAIL_CALL
    for f in functions:
        check.starts.setdefault(f.name, []).append(_signed(f.offset))
        blocks = []
        for bi, b in enumerate(f.blocks):
            succs = []
            for si, s in enumerate(b.successors):
                if s.kind == tail_call:
                    succs.append(
                        (
                            s.kind,
                            _target(
                                check,
                                base,
                                s.target,
                                s.target_name,
                                s.target_module,
                                f.index,
                                "blocks",
                                [str(bi), "3", str(si), "1"],
                            ),
                            s.target_name,
                        )
                    )
                else:
                    succs.append((s.kind, s.target, ""))
            blocks.append((b.offset, b.size, b.instruction_count, succs))
        calls = [
            (
                c.site_offset,
                _target(check, base, c.target, c.target_name, c.target_module, f.index, "calls", [str(ci), "1"]),
                c.target_name,
                c.target_module,
            )
            for ci, c in enumerate(f.calls)
        ]
        # The digest covers undecodable_offset only for an undecodable function: store nothing else.
        undecodable_offset = f.undecodable_offset if f.undecodable else 0
        yield (
            (digest, f.index, f.name, _signed(f.offset), f.size, len(blocks), f.undecodable, undecodable_offset),
            (
                digest,
                f.index,
                orjson.dumps(blocks).decode(),
                orjson.dumps(calls).decode(),
                orjson.dumps(list(f.indirect_call_sites)).decode(),
            ),
            len(blocks),
        )


def check_targets(check: TargetCheck) -> tuple[str | None, list[tuple[int, str, list[str]]]]:
    """Judge the named targets TargetCheck noted once the piece is complete: (why the piece is refused, or
    None; the targets it cannot check as (function index, JSON column, path of the address))."""
    unchecked: list[tuple[int, str, list[str]]] = []
    for fname, off, rel, index, column, path in check.pending:
        starts = check.starts.get(fname)
        if starts is None:
            unchecked.append((index, column, path))
            continue
        if all(_signed(start + off) != rel for start in starts):
            where = f"{fname}+{off:#x}" if off else fname
            return (
                f"function {index} names target {where} at {rel:#x} from the module base, but {fname} "
                f"starts at {', '.join(f'{x:#x}' for x in starts[:4])}"
            ), unchecked
    return None, unchecked


async def verify_targets(engine: AsyncEngine, staging: str, check: TargetCheck) -> str | None:
    """Check the named targets of a complete upload (check_targets); returns why the piece is refused, or
    None. Targets it cannot check lose their address in the staged rows."""
    problem, unchecked = check_targets(check)
    if problem is not None:
        return problem
    for column in ("calls", "blocks"):
        rows = [{"s": staging, "i": index, "p": path} for index, col, path in unchecked if col == column]
        if rows:
            async with engine.begin() as conn:
                await conn.execute(
                    text(
                        f"UPDATE function_code SET {column} = jsonb_set({column}, CAST(:p AS text[]), 'null') "
                        "WHERE digest = :s AND index = :i"
                    ),
                    rows,
                )
    return None


async def store_chunk(
    engine: AsyncEngine, digest: str, base: int, functions: Iterable["pb.Function"], check: TargetCheck
) -> tuple[int, int, float]:
    """Write one chunk; returns (functions, blocks, seconds)."""
    t0 = time.perf_counter()
    fn_rows, code_rows, blocks = [], [], 0
    for fn_row, code_row, n in function_rows(digest, base, functions, check):
        fn_rows.append(fn_row)
        code_rows.append(code_row)
        blocks += n
    if not fn_rows:
        return 0, 0, time.perf_counter() - t0
    async with engine.begin() as conn:
        raw = await conn.get_raw_connection()
        driver = raw.driver_connection
        assert driver is not None
        async with driver.cursor() as cur:
            async with cur.copy(
                'COPY functions (digest, index, name, "offset", size, block_count, undecodable, '
                "undecodable_offset) FROM STDIN"
            ) as copy:
                for row in fn_rows:
                    await copy.write_row(row)
            async with cur.copy(
                "COPY function_code (digest, index, blocks, calls, indirect_call_sites) FROM STDIN"
            ) as copy:
                for code_row in code_rows:
                    await copy.write_row(code_row)
    return len(fn_rows), blocks, time.perf_counter() - t0


STAGING_PREFIX = "staging-"


async def begin_upload(engine: AsyncEngine, staging: str, module: str, function_count: int, block_count: int) -> None:
    """Create the staging piece one upload writes its chunks under."""
    async with engine.begin() as conn:
        await conn.execute(
            text("""
            INSERT INTO catalog_pieces (digest, module, function_count, block_count, complete, stored_at)
            VALUES (:s, :m, :f, :b, false, now())"""),
            {"s": staging, "m": module, "f": function_count, "b": block_count},
        )


async def discard_upload(engine: AsyncEngine, staging: str) -> None:
    """Delete an upload that failed or was abandoned, with every row it wrote."""
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM catalog_pieces WHERE digest = :s"), {"s": staging})


async def discard_stale_uploads(engine: AsyncEngine, older_than_s: float = 0) -> int:
    """Delete staging pieces left by a backend that stopped mid-upload."""
    async with engine.begin() as conn:
        result = await conn.execute(
            text("""
            DELETE FROM catalog_pieces WHERE digest LIKE 'staging-%'
            AND coalesce(stored_at, now()) <= now() - make_interval(secs => :age)"""),
            {"age": older_than_s},
        )
        return result.rowcount or 0


async def promote_upload(
    engine: AsyncEngine, staging: str, digest: str, module: str, function_count: int, block_count: int
) -> bool:
    """Move a verified upload to its digest; False if the piece was already complete (rows dropped)."""
    async with engine.begin() as conn:
        inserted = (
            await conn.execute(
                text("""
            INSERT INTO catalog_pieces (digest, module, function_count, block_count, complete, stored_at)
            VALUES (:d, :m, :f, :b, true, now()) ON CONFLICT (digest) DO NOTHING RETURNING digest"""),
                {"d": digest, "m": module, "f": function_count, "b": block_count},
            )
        ).first()
        if inserted is not None:
            await conn.execute(text("UPDATE functions SET digest = :d WHERE digest = :s"), {"d": digest, "s": staging})
            await conn.execute(
                text("UPDATE function_code SET digest = :d WHERE digest = :s"), {"d": digest, "s": staging}
            )
        await conn.execute(text("DELETE FROM catalog_pieces WHERE digest = :s"), {"s": staging})
    if inserted is not None:
        async with engine.begin() as conn:
            await conn.execute(text("ANALYZE functions"))
    return inserted is not None


async def index_map(engine: AsyncEngine, digest: str) -> dict[int, tuple[int, int]]:
    """function index → (functions.id, size) for one stored piece."""
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT index, id, size FROM functions WHERE digest = :d"), {"d": digest})
        return {r[0]: (r[1], r[2]) for r in rows}


# Catalog pieces for the console ------------------------------------------------------------------


async def catalog_document(session: AsyncSession, digest: str) -> bytes | None:
    """A complete catalog piece as the CatalogPublic JSON document, built by Postgres; None when the
    piece is unknown or still arriving (a partial piece must never be cached as the piece)."""
    row = (
        await session.execute(
            text("""
        SELECT cp.module, (SELECT json_build_object(
                   'digest', CAST(:d AS text), 'module', cp.module, 'function_count', count(*),
                   'ids', coalesce(json_agg(f.id ORDER BY f."offset", f.index), '[]'::json),
                   'names', coalesce(json_agg(f.name ORDER BY f."offset", f.index), '[]'::json),
                   'offsets', coalesce(json_agg(f."offset" ORDER BY f."offset", f.index), '[]'::json),
                   'sizes', coalesce(json_agg(f.size ORDER BY f."offset", f.index), '[]'::json),
                   'block_counts', coalesce(json_agg(f.block_count ORDER BY f."offset", f.index), '[]'::json),
                   'undecodable', '[]'::json,
                   'undecodable_ids', coalesce(json_agg(f.id) FILTER (WHERE f.undecodable), '[]'::json))::text
               FROM functions f WHERE f.digest = :d) AS doc
        FROM catalog_pieces cp WHERE cp.digest = :d AND cp.complete"""),
            {"d": digest},
        )
    ).first()
    if row is None:
        return None
    doc = orjson.loads(row.doc)
    # Positions rather than ids, so the console marks them without a lookup.
    bad = set(doc.pop("undecodable_ids"))
    doc["undecodable"] = [i for i, fid in enumerate(doc["ids"]) if fid in bad] if bad else []
    return orjson.dumps(doc)
