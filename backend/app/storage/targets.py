# SPDX-License-Identifier: Apache-2.0
"""A host's targets (the kernel, attached processes) and their modules, as its agent reports them.

An agent reports its whole list in Hello and after every change (TargetsUpdate, and in the results of
attach and detach). Reported targets are upserted; a process target the agent no longer reports is
`gone` (the agent restarted and the process did not survive it). Modules are replaced only for targets
that carry them (attached ones): an ended target keeps its modules, so its measurements' rows still
find their functions and addresses.
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.protocol.agent_input import TARGET_KINDS, TARGET_STATES
from app.protocol.proto import pb
from app.storage.models import hex64, i64_to_u64, u64_to_i64


def _dt(ns: int) -> datetime | None:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC) if ns > 0 else None


async def store(
    conn: AsyncConnection,
    host_id: str,
    targets: Sequence["pb.Target"],
    complete_list: bool,
    kernel_modules: Sequence["pb.ModuleRef"] | None = None,
) -> None:
    """Upsert reported targets (pb.Target) and the modules of those that carry them. With
    complete_list, process targets not reported are marked gone. kernel_modules (Hello.modules)
    replace the kernel target's modules."""
    for t in targets:
        await conn.execute(
            text("""
            INSERT INTO host_targets (host_id, id, kind, pid, command, executable, state, detail, attached_at,
                                      ended_at, updated_at)
            VALUES (:h, :id, :kind, :pid, :cmd, :exe, :state, :detail, :att, :end, now())
            ON CONFLICT (host_id, id) DO UPDATE SET kind = excluded.kind, pid = excluded.pid,
              command = excluded.command, executable = excluded.executable, state = excluded.state,
              detail = excluded.detail, attached_at = coalesce(excluded.attached_at, host_targets.attached_at),
              ended_at = excluded.ended_at, updated_at = now()"""),
            {
                "h": host_id,
                "id": t.id,
                "kind": TARGET_KINDS[t.kind],
                "pid": t.pid or None,
                "cmd": t.command,
                "exe": t.executable,
                "state": TARGET_STATES[t.state],
                "detail": t.detail,
                "att": _dt(t.attached_unix_ns),
                "end": _dt(t.ended_unix_ns),
            },
        )
        if t.kind == pb.TARGET_KIND_PROCESS and t.modules:
            await _replace_modules(conn, host_id, t.id, t.modules)
    if kernel_modules is not None:
        await _replace_modules(conn, host_id, "kernel", kernel_modules)
    if complete_list:
        await conn.execute(
            text("""
            UPDATE host_targets SET state = 'gone', updated_at = now(), ended_at = coalesce(ended_at, now()),
              detail = 'no longer served by the agent (it restarted and the process did not survive it)'
            WHERE host_id = :h AND kind = 'process' AND state = 'attached' AND NOT (id = ANY(:ids))"""),
            {"h": host_id, "ids": [t.id for t in targets]},
        )


async def _replace_modules(
    conn: AsyncConnection, host_id: str, target_id: str, modules: Sequence["pb.ModuleRef"]
) -> None:
    await conn.execute(
        text("DELETE FROM host_modules WHERE host_id = :h AND target_id = :t"), {"h": host_id, "t": target_id}
    )
    if not modules:
        return
    await conn.execute(
        text("""
        INSERT INTO host_modules (host_id, target_id, name, digest, base_address, function_count, block_count,
                                  position, build_id)
        VALUES (:h, :t, :n, :d, :b, :f, :bc, :p, :bid)"""),
        [
            {
                "h": host_id,
                "t": target_id,
                "n": m.name,
                "d": m.digest,
                "b": u64_to_i64(m.base_address),
                "f": m.function_count,
                "bc": m.block_count,
                "p": i,
                "bid": m.build_id,
            }
            for i, m in enumerate(modules)
        ],
    )


async def list_targets(session: AsyncSession, host_id: str) -> list[dict[str, Any]]:
    rows = await session.execute(
        text("""
        SELECT t.*, (SELECT count(*) FROM host_modules hm WHERE hm.host_id = t.host_id AND hm.target_id = t.id)
                    AS module_count,
               (SELECT count(*) FROM measurements m WHERE m.host_id = t.host_id AND m.target_id = t.id
                  AND m.state IN ('starting', 'armed', 'running')) AS active_measurements
        FROM host_targets t WHERE t.host_id = :h
        ORDER BY (t.kind = 'kernel') DESC, (t.state = 'attached') DESC, t.attached_at DESC NULLS LAST, t.id"""),
        {"h": host_id},
    )
    return [
        {
            "id": r.id,
            "kind": r.kind,
            "pid": r.pid,
            "command": r.command,
            "executable": r.executable,
            "state": r.state,
            "detail": r.detail,
            "attached_at": r.attached_at,
            "ended_at": r.ended_at,
            "module_count": int(r.module_count),
            "active_measurements": int(r.active_measurements),
        }
        for r in rows
    ]


async def target_exists(session: AsyncSession, host_id: str, target_id: str) -> str | None:
    """The target's state, or None when the host has no such target."""
    return (
        await session.execute(
            text("SELECT state FROM host_targets WHERE host_id = :h AND id = :t"), {"h": host_id, "t": target_id}
        )
    ).scalar_one_or_none()


async def list_modules(session: AsyncSession, host_id: str, target_id: str) -> list[dict[str, Any]]:
    rows = await session.execute(
        text("""
        SELECT hm.name, hm.digest, hm.base_address, hm.function_count, hm.block_count, hm.build_id, hm.target_id,
               coalesce(cp.complete, false) AS complete
        FROM host_modules hm LEFT JOIN catalog_pieces cp ON cp.digest = hm.digest
        WHERE hm.host_id = :h AND hm.target_id = :t ORDER BY hm.position, hm.name"""),
        {"h": host_id, "t": target_id},
    )
    out = []
    for r in rows:
        base = i64_to_u64(r.base_address)
        out.append(
            {
                "name": r.name,
                "digest": r.digest,
                "base_address": base,
                "base_address_hex": hex64(base),
                "function_count": r.function_count,
                "block_count": r.block_count,
                "complete": r.complete,
                "build_id": r.build_id,
                "target_id": r.target_id,
            }
        )
    return out
