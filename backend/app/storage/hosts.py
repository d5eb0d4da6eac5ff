# SPDX-License-Identifier: Apache-2.0
"""Hosts as the console lists them, with their loaded modules."""

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession

from app.storage import audit_log, targets
from app.storage.models import Host

_HOST_SQL = """
SELECT h.*, count(hm.name) AS module_count,
       coalesce(bool_and(coalesce(cp.complete, false)), false) AS all_complete,
       coalesce(sum(hm.function_count), 0) AS fn_count, coalesce(sum(hm.block_count), 0) AS blk_count
FROM hosts h
LEFT JOIN host_modules hm ON hm.host_id = h.id AND hm.target_id = 'kernel'
LEFT JOIN catalog_pieces cp ON cp.digest = hm.digest
{where}
GROUP BY h.id
ORDER BY h.hostname, h.id
"""


_skew_ms = 120_000  # set from the settings by set_clock_skew


def set_clock_skew(seconds: float) -> None:
    global _skew_ms
    _skew_ms = int(seconds * 1000)


def _host_public(row: Row[Any]) -> dict[str, Any]:
    m = row._mapping
    l1i = m["l1i"]
    return {
        "id": m["id"],
        "hostname": m["hostname"],
        "kernel_release": m["kernel_release"],
        "kernel_build_id": m["kernel_build_id"],
        "cpu_model": m["cpu_model"],
        "cpu_count": m["cpu_count"],
        "l1i": l1i if l1i else None,
        "capabilities": m["capabilities"] or [],
        "agent_version": m["agent_version"],
        "online": m["online"],
        "last_seen": m["last_seen"],
        "connected_at": m["connected_at"],
        "catalog_complete": bool(m["module_count"] and m["all_complete"]),
        "function_count": int(m["fn_count"]),
        "block_count": int(m["blk_count"]),
        "sample_frequency_hz": m["sample_frequency_hz"],
        "sample_event": m["sample_event"],
        "status": m["status"],
        "enrolled": m["cert_fingerprint"] is not None,
        "cert_not_after": m["cert_not_after"],
        "replica": m["replica"],
        "clock_offset_ms": m["clock_offset_ms"],
        "clock_skewed": m["clock_offset_ms"] is not None and abs(m["clock_offset_ms"]) > _skew_ms,
        "refused_batches": int(m["refused_batches"]),
        "labels": m["labels"] or {},
        "agent_labels": m["agent_labels"] or {},
        "labels_edited_by": m["labels_edited_by"],
        "labels_edited_at": m["labels_edited_at"],
    }


async def list_hosts(session: AsyncSession) -> list[dict[str, Any]]:
    rows = await session.execute(text(_HOST_SQL.format(where="")))
    return [_host_public(r) for r in rows]


async def get_host_public(session: AsyncSession, host_id: str) -> dict[str, Any] | None:
    rows = (await session.execute(text(_HOST_SQL.format(where="WHERE h.id = :h")), {"h": host_id})).all()
    return _host_public(rows[0]) if rows else None


async def host_exists(session: AsyncSession, host_id: str) -> bool:
    return (await session.get(Host, host_id)) is not None


async def list_modules(session: AsyncSession, host_id: str, target_id: str = "kernel") -> list[dict[str, Any]]:
    return await targets.list_modules(session, host_id, target_id)


async def set_labels(session: AsyncSession, host_id: str, labels: dict[str, str] | None, actor: str) -> None:
    """Set a host's labels (None: follow its agent's again), with an audit record of before and after."""
    host = await session.get(Host, host_id, with_for_update=True)
    assert host is not None
    before = dict(host.labels or {})
    if labels is None:
        host.labels, host.labels_edited_by, host.labels_edited_at = dict(host.agent_labels or {}), None, None
    else:
        host.labels, host.labels_edited_by, host.labels_edited_at = labels, actor, datetime.now(UTC)
    audit_log.record(
        session, actor, "host_labels", host_id, {"before": before, "after": host.labels, "reset": labels is None}
    )
    await session.commit()
