# SPDX-License-Identifier: Apache-2.0
"""Storing catalog pieces sent by agents.

A piece arrives as ordered chunks of functions; each chunk is written with COPY into `functions`
(searchable columns) and `function_code` (blocks, successors and calls as compact JSON). Addresses of
tail-call and call targets arrive absolute for the sending host and are stored relative to the
module's base there, so every host of the same build (each with its own KASLR slide) can use them.
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


async def discard_partial(engine: AsyncEngine, digest: str) -> None:
    """Remove what an interrupted earlier transfer of this piece left, before it is sent again."""
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM function_code WHERE digest = :d"), {"d": digest})
        await conn.execute(text("DELETE FROM functions WHERE digest = :d"), {"d": digest})


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


async def mark_complete(engine: AsyncEngine, digest: str) -> int:
    async with engine.begin() as conn:
        stored = (await conn.execute(text("SELECT count(*) FROM functions WHERE digest = :d"),
                                     {"d": digest})).scalar_one()
        await conn.execute(text("UPDATE catalog_pieces SET complete = true, stored_at = now() WHERE digest = :d"),
                           {"d": digest})
        await conn.execute(text("ANALYZE functions"))
    return stored


async def index_map(engine: AsyncEngine, digest: str) -> dict[int, int]:
    """function index → functions.id for one stored piece."""
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT index, id FROM functions WHERE digest = :d"), {"d": digest})
        return {r[0]: r[1] for r in rows}
