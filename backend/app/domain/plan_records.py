# SPDX-License-Identifier: Apache-2.0
"""A plan as stored: its public shape, its audit records, its live event, whether it went stale."""

import logging
import uuid
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.live import LiveHub
from app.storage import audit_log
from app.storage.models import Plan

log = logging.getLogger("hotpath.plans")


STALE_FROM = ("ready", "requested", "approved", "install_failed", "installed")
FINAL = ("failed", "cancelled", "rejected", "reverted", "stale")
ACTIVE_COMMAND = ("queued", "sent", "running")


# A plan's record: every column but its body (plan_json, the agent's plan, up to 16 MiB, which never
# changes once stored: GET .../plans/{id}/body serves it), with its group's function names root first
# (the plan was checked when stored: plan_check) and whether it has a body. Every read and RETURNING of
# the plan domain names these columns, so no poll, step or reconciliation loads the body.
RECORD = ", ".join(c.name for c in Plan.__table__.columns if c.name != "plan_json") + (
    ", coalesce(jsonb_path_query_array(plan_json, '$.group[*].function ? (@.type() == \"string\")'), '[]') AS members"
    ", plan_json IS NOT NULL AS has_body"
)


def publish_state(hub: LiveHub, host_id: str, plan_id: str, state: str) -> None:
    """Tell the consoles showing the host that one of its plans changed state, once the change is
    committed: an approval shows on the requester's open page at once, not at its next poll."""
    hub.publish(f"host:{host_id}", {"type": "plan", "host_id": host_id, "plan_id": str(plan_id), "state": state})


def is_hot_set(r: Row[Any]) -> bool:
    """Whether the plan was asked for as a process's whole hot set (PlanCreate.hot_set)."""
    return isinstance(r.options, dict) and bool(r.options.get("hot_set"))


def public(r: Row[Any], detail: bool = False) -> dict[str, Any]:
    out = {
        "id": str(r.id),
        "host_id": r.host_id,
        "target_id": r.target_id,
        "root_digest": r.root_digest,
        "root_function_index": r.root_function_index,
        "root_name": r.root_name,
        "options": r.options,
        "state": r.state,
        "error": r.error,
        "plan_status": r.plan_status,
        "estimated": r.estimated,
        "code_sha256": r.code_sha256,
        "build_id": r.build_id,
        "target_pid": r.target_pid,
        "target_start_time": r.target_start_time,
        "target_module": r.target_module,
        "kernel_build_id": r.kernel_build_id,
        "make_command": str(r.make_command) if r.make_command else None,
        "created_by": r.created_by,
        "created_at": r.created_at,
        "ready_at": r.ready_at,
        "requested_by": r.requested_by,
        "requested_at": r.requested_at,
        "approved_by": r.approved_by,
        "approved_at": r.approved_at,
        "approved_code_sha256": r.approved_code_sha256,
        "approved_build_id": r.approved_build_id,
        "rejected_by": r.rejected_by,
        "rejected_at": r.rejected_at,
        "reject_reason": r.reject_reason,
        "install_by": r.install_by,
        "installed_at": r.installed_at,
        "revert_by": r.revert_by,
        "reverted_at": r.reverted_at,
        "stale_reason": r.stale_reason,
        "window_s": r.window_s,
        "before_measurement": r.before_measurement,
        "after_measurement": r.after_measurement,
        "updated_at": r.updated_at,
        "members": list(r.members or ()),
        "hot_set": is_hot_set(r),
        "derived_from": str(r.derived_from) if r.derived_from else None,
        "rollout_id": str(r.rollout_id) if r.rollout_id else None,
    }
    if detail:
        out["body_etag"] = body_etag(r)
        out["install_detail"] = r.install_detail
        out["revert_detail"] = r.revert_detail
        out["install_command"] = str(r.install_command) if r.install_command else None
        out["revert_command"] = str(r.revert_command) if r.revert_command else None
    return out


def body_etag(r: Row[Any]) -> str | None:
    """The entity tag of the plan's body (None: it has none): the body is stored once, when the agent's
    answer is checked, and never changes, so the plan's id and the time it was stored name it."""
    if not r.has_body:
        return None
    stored = r.ready_at or r.updated_at
    return f'"{r.id}.{int(stored.timestamp() * 1_000_000)}"'


def audit(db: AsyncSession, actor: str, action: str, row: Row[Any], **extra: Any) -> None:
    audit_log.record(
        db,
        actor,
        action,
        str(row.id),
        {
            "plan_id": str(row.id),
            "host_id": row.host_id,
            "root": row.root_name,
            "code_sha256": row.code_sha256,
            **extra,
        },
    )


async def find(db: AsyncSession, host_id: str, plan_id: uuid.UUID, lock: bool = False) -> Row[Any] | None:
    return (
        await db.execute(
            text(f"SELECT {RECORD} FROM plans WHERE id = :id AND host_id = :h" + (" FOR UPDATE" if lock else "")),
            {"id": plan_id, "h": host_id},
        )
    ).first()


async def stale_reason(db: AsyncSession, row: Row[Any]) -> str | None:
    """Why a plan no longer fits its target (None: it still does)."""
    t = (
        await db.execute(
            text("SELECT state, pid FROM host_targets WHERE host_id = :h AND id = :t"),
            {"h": row.host_id, "t": row.target_id},
        )
    ).first()
    if t is None:
        return f"the target {row.target_id} is gone"
    if t.state != "attached":
        return f"the target {row.target_id} has {t.state}" + (
            " (the installed copy went with it)" if row.state == "installed" else ""
        )
    if row.target_id == "kernel":
        kb = (await db.execute(text("SELECT kernel_build_id FROM hosts WHERE id = :h"), {"h": row.host_id})).scalar()
        if row.kernel_build_id and kb and kb != row.kernel_build_id:
            return f"the kernel's build id is {kb} now, not {row.kernel_build_id}"
        return None
    if row.target_pid is not None and row.target_id != f"p{row.target_pid}-{row.target_start_time}":
        return f"the plan is for pid {row.target_pid} started at {row.target_start_time}, not {row.target_id}"
    if row.target_module and row.build_id:
        mb = (
            await db.execute(
                text("""
            SELECT build_id FROM host_modules WHERE host_id = :h AND target_id = :t AND name = :n"""),
                {"h": row.host_id, "t": row.target_id, "n": row.target_module},
            )
        ).scalar()
        if mb is not None and mb and mb != row.build_id:
            return f"{row.target_module} has build id {mb} now, not {row.build_id}"
    return None


async def refresh_stale(db: AsyncSession, host_id: str, plan_id: uuid.UUID | None = None) -> None:
    """Mark the host's plans that no longer fit their target stale (audited); the caller commits."""
    rows = (
        await db.execute(
            text(
                f"SELECT {RECORD} FROM plans WHERE host_id = :h AND state = ANY(:s)"
                + (" AND id = :id" if plan_id else "")
            ),
            {"h": host_id, "s": list(STALE_FROM), "id": plan_id},
        )
    ).all()
    for r in rows:
        why = await stale_reason(db, r)
        if why is None:
            continue
        changed = (
            await db.execute(
                text(f"""
            UPDATE plans SET state = 'stale', stale_reason = :w, updated_at = now()
            WHERE id = :id AND state = :s RETURNING {RECORD}"""),
                {"id": r.id, "s": r.state, "w": why},
            )
        ).first()
        if changed is not None:
            audit(db, "system", "plan_stale", changed, reason=why, was=r.state)
