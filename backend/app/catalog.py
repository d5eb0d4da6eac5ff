# SPDX-License-Identifier: Apache-2.0
"""Storing catalog pieces sent by agents.

A piece arrives as ordered chunks of functions; each chunk is written with COPY into `functions`
(searchable columns) and `function_code` (blocks, successors and calls as compact JSON). Addresses of
tail-call and call targets arrive absolute for the sending host and are stored relative to the
module's base there, so every host of the same build (each with its own KASLR slide) can use them.

Until a piece is verified (all chunks in order, function and block counts as announced, digest
recomputed from the content) its rows live under a staging key of its own, which no host's module
refers to: nobody sees them, and a piece that fails is deleted whole. Verification moves the rows to
the real digest in one transaction; a piece that another upload completed first is simply dropped.
"""
import time
from collections.abc import Iterable

import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.proto import pb

_MASK = (1 << 64) - 1


def _signed(value: int) -> int:
    value &= _MASK
    return value - (1 << 64) if value >= (1 << 63) else value


def function_rows(digest: str, base: int, functions: Iterable["pb.Function"]):
    """Yield (functions row, function_code row, block count) per function of a chunk."""
    tail_call = pb.SUCCESSOR_KIND_TAIL_CALL
    for f in functions:
        blocks = []
        for b in f.blocks:
            succs = []
            for s in b.successors:
                if s.kind == tail_call:
                    succs.append((s.kind, _signed(s.target - base), s.target_name))
                else:
                    succs.append((s.kind, s.target, ""))
            blocks.append((b.offset, b.size, b.instruction_count, succs))
        calls = [(c.site_offset, _signed(c.target - base), c.target_name, c.target_module) for c in f.calls]
        yield ((digest, f.index, f.name, _signed(f.offset), f.size, len(blocks), f.undecodable, f.undecodable_offset),
               (digest, f.index, orjson.dumps(blocks).decode(), orjson.dumps(calls).decode(),
                orjson.dumps(list(f.indirect_call_sites)).decode()),
               len(blocks))


async def store_chunk(engine: AsyncEngine, digest: str, base: int, functions) -> tuple[int, int, float]:
    """Write one chunk; returns (functions, blocks, seconds)."""
    t0 = time.perf_counter()
    fn_rows, code_rows, blocks = [], [], 0
    for fn_row, code_row, n in function_rows(digest, base, functions):
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
            async with cur.copy('COPY functions (digest, index, name, "offset", size, block_count, undecodable, '
                                'undecodable_offset) FROM STDIN') as copy:
                for row in fn_rows:
                    await copy.write_row(row)
            async with cur.copy("COPY function_code (digest, index, blocks, calls, indirect_call_sites) "
                                "FROM STDIN") as copy:
                for row in code_rows:
                    await copy.write_row(row)
    return len(fn_rows), blocks, time.perf_counter() - t0


STAGING_PREFIX = "staging-"


async def begin_upload(engine: AsyncEngine, staging: str, module: str, function_count: int,
                       block_count: int) -> None:
    """Create the staging piece one upload writes its chunks under."""
    async with engine.begin() as conn:
        await conn.execute(text("""
            INSERT INTO catalog_pieces (digest, module, function_count, block_count, complete, stored_at)
            VALUES (:s, :m, :f, :b, false, now())"""),
            {"s": staging, "m": module, "f": function_count, "b": block_count})


async def discard_upload(engine: AsyncEngine, staging: str) -> None:
    """Delete an upload that failed or was abandoned, with every row it wrote."""
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM catalog_pieces WHERE digest = :s"), {"s": staging})


async def discard_stale_uploads(engine: AsyncEngine, older_than_s: float = 0) -> int:
    """Delete staging pieces left by a backend that stopped mid-upload."""
    async with engine.begin() as conn:
        result = await conn.execute(text("""
            DELETE FROM catalog_pieces WHERE digest LIKE 'staging-%'
            AND coalesce(stored_at, now()) <= now() - make_interval(secs => :age)"""), {"age": older_than_s})
        return result.rowcount or 0


async def promote_upload(engine: AsyncEngine, staging: str, digest: str, module: str, function_count: int,
                         block_count: int) -> bool:
    """Move a verified upload to its digest; False if the piece was already complete (rows dropped)."""
    async with engine.begin() as conn:
        inserted = (await conn.execute(text("""
            INSERT INTO catalog_pieces (digest, module, function_count, block_count, complete, stored_at)
            VALUES (:d, :m, :f, :b, true, now()) ON CONFLICT (digest) DO NOTHING RETURNING digest"""),
            {"d": digest, "m": module, "f": function_count, "b": block_count})).first()
        if inserted is not None:
            await conn.execute(text("UPDATE functions SET digest = :d WHERE digest = :s"), {"d": digest, "s": staging})
            await conn.execute(text("UPDATE function_code SET digest = :d WHERE digest = :s"),
                               {"d": digest, "s": staging})
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
