# SPDX-License-Identifier: Apache-2.0
"""What the layout-candidate ranking (app.domain.layout_candidates) reads outside the series: a target's
functions with their catalog blocks and runtime addresses, the functions its plans kept in place and
the rule that kept them, and the host's L1i geometry."""

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.storage.models import i64_to_u64


async def target_functions(
    session: AsyncSession,
    host_id: str,
    target_id: str,
    function_ids: list[int] | None = None,
    keys: list[tuple[str, int]] | None = None,
) -> list[dict[str, Any]]:
    """Functions of the target's modules, named by id or by (digest, index): their catalog facts
    (size, blocks, whether their bytes decoded) and their address on the host."""
    if function_ids is not None:
        match = "JOIN unnest(CAST(:ids AS bigint[])) AS q(id) ON q.id = f.id"
        params: dict[str, Any] = {"ids": function_ids}
    else:
        match = "JOIN unnest(CAST(:kd AS text[]), CAST(:ki AS int[])) AS q(d, i) ON q.d = f.digest AND q.i = f.index"
        params = {"kd": [k[0] for k in keys or []], "ki": [k[1] for k in keys or []]}
    if not next(iter(params.values())):
        return []
    rows = await session.execute(
        text(f"""
        SELECT f.id, f.digest, f.index AS fn_index, f.name, f.size, f.undecodable, f.undecodable_offset,
               hm.name AS module, hm.base_address + f."offset" AS address, fc.blocks
        FROM functions f {match}
        JOIN host_modules hm ON hm.digest = f.digest AND hm.host_id = :h AND hm.target_id = :t
        LEFT JOIN function_code fc ON fc.digest = f.digest AND fc.index = f.index"""),
        {**params, "h": host_id, "t": target_id},
    )
    return [
        {
            "function_id": int(r.id),
            "digest": r.digest,
            "index": int(r.fn_index),
            "name": r.name,
            "module": r.module,
            "size": int(r.size),
            "address": i64_to_u64(int(r.address)),
            "undecodable": bool(r.undecodable),
            "undecodable_offset": int(r.undecodable_offset),
            "blocks": r.blocks or [],
        }
        for r in rows
    ]


async def kept_in_place(session: AsyncSession, host_id: str, target_id: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The functions the target's plans kept in place, by (name, address): the newest plan's rule."""
    rows = await session.execute(
        text("""
        SELECT DISTINCT ON (k ->> 'function', k ->> 'address') p.id, k ->> 'function' AS name,
               k ->> 'address' AS address, k ->> 'rule' AS rule, coalesce(k ->> 'detail', '') AS detail
        FROM plans p, jsonb_array_elements(
            CASE WHEN jsonb_typeof(p.plan_json -> 'kept_in_place') = 'array' THEN p.plan_json -> 'kept_in_place'
                 ELSE '[]'::jsonb END) AS k
        WHERE p.host_id = :h AND p.target_id = :t AND p.plan_json IS NOT NULL
        ORDER BY k ->> 'function', k ->> 'address', p.created_at DESC"""),
        {"h": host_id, "t": target_id},
    )
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        try:
            address = int(r.address, 16)
        except (TypeError, ValueError):
            continue
        out[(r.name, address)] = {"plan_id": r.id, "rule": r.rule, "detail": r.detail}
    return out


async def l1i(session: AsyncSession, host_id: str) -> dict[str, Any] | None:
    """The host's L1 I-cache geometry as its agent reported it (size_bytes, line_bytes, ways), or None."""
    value = (await session.execute(text("SELECT l1i FROM hosts WHERE id = :h"), {"h": host_id})).scalar_one_or_none()
    return value or None
