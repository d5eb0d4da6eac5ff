# SPDX-License-Identifier: Apache-2.0
"""The audit log: who did what, when, to what."""

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.storage.models import AuditLog


def record(
    session: AsyncSession, actor: str, action: str, target: str | None = None, detail: dict[str, Any] | None = None
) -> None:
    session.add(AuditLog(actor=actor, action=action, target=target, detail=detail or {}))


async def recent(session: AsyncSession, limit: int, action: str | None) -> list[AuditLog]:
    stmt = select(AuditLog).order_by(AuditLog.id.desc()).limit(limit)
    if action:
        stmt = stmt.where(AuditLog.action == action)
    return list((await session.execute(stmt)).scalars())
