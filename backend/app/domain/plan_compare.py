# SPDX-License-Identifier: Apache-2.0
"""Interleaved comparisons of installed plans, stored: the ComparePlan command asked (after a guarded
install, or when a user compares again), its answer checked and summarized (app.domain.compare_stats),
the guard's judgement, and the latest comparison as PlanDetail shows it.

A comparison is `running` from its request until the command ends: `done` with the windows and the
backend's summary, or `failed` with the reason (the agent's error, or why the backend refused the
answer). A guarded comparison whose verdict is "slower" asks for the plan's revert by the system
(app.domain.plans registers the handler and does the revert); every step is in the plan's audit trail.
"""

import logging
import uuid
from typing import Any

import orjson
from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession

from app.domain import compare_stats
from app.domain.commands import Answer, Commands
from app.domain.plan_records import RECORD, audit
from app.domain.plan_results import _detail_json
from app.protocol.agent_input import InvalidInput
from app.protocol.proto import pb

log = logging.getLogger("hotpath.plans")
DEFAULT_PAIRS = 6
DEFAULT_WINDOW_S = 1.0


def not_comparable(plan: Row[Any]) -> str | None:
    """Why a plan cannot be compared now (None: it can)."""
    if plan.target_id == "kernel":
        return "kernel installs are not compared here: the interleaved comparison is of a process plan"
    if plan.state != "installed":
        return f"The plan is {plan.state}; only an installed plan is compared"
    return None


async def running(db: AsyncSession, plan_id: uuid.UUID) -> bool:
    return bool(
        (
            await db.execute(
                text("SELECT 1 FROM plan_comparisons WHERE plan_id = :p AND state = 'running' LIMIT 1"), {"p": plan_id}
            )
        ).scalar()
    )


async def start(
    db: AsyncSession,
    commands: Commands,
    plan: Row[Any],
    actor: str,
    pairs: int,
    window_seconds: float,
    guard: bool,
) -> uuid.UUID:
    """Queue a ComparePlan for an installed process plan and its comparison row (the caller checked
    not_comparable and running, and commits); the command's id."""
    params = {
        "plan_id": str(plan.id),
        "target": plan.target_id,
        "pairs": pairs,
        "window_seconds": window_seconds,
        "guard": guard,
    }
    cmd, _ = await commands.create(db, plan.host_id, "compare_plan", params, actor)
    cid = uuid.UUID(cmd["id"])
    await db.execute(
        text("""
        INSERT INTO plan_comparisons (id, plan_id, host_id, command_id, requested_by, guard, pairs, window_seconds,
                                      state)
        VALUES (:id, :p, :h, :c, :by, :g, :n, :w, 'running')"""),
        {
            "id": uuid.uuid4(),
            "p": plan.id,
            "h": plan.host_id,
            "c": cid,
            "by": actor,
            "g": guard,
            "n": pairs,
            "w": window_seconds,
        },
    )
    audit(
        db,
        actor,
        "plan_compare_requested",
        plan,
        command_id=str(cid),
        pairs=pairs,
        window_seconds=window_seconds,
        guard=guard,
    )
    return cid


async def on_result(db: AsyncSession, cmd: Row[Any], result: "pb.CommandResult") -> tuple[Answer, str | None]:
    """Check a ComparePlan answer, store its windows and the backend's summary, judge a guarded one:
    (the command's answer, the guard's reason to revert the plan or None)."""
    comp = (
        await db.execute(text("SELECT * FROM plan_comparisons WHERE command_id = :c FOR UPDATE"), {"c": cmd.id})
    ).first()
    if comp is None or comp.state != "running":
        return (None, "the comparison this answers is not running"), None
    if not result.ok:
        return (None, None), None  # on_end records the agent's reason
    plan = (await db.execute(text(f"SELECT {RECORD} FROM plans WHERE id = :id FOR UPDATE"), {"id": comp.plan_id})).one()
    try:
        if result.WhichOneof("kind") != "compare" or result.compare.plan_id != str(plan.id):
            raise compare_stats.CompareInvalid("it is not this plan's comparison")
        detail = _detail_json(result.compare.detail_json, "CompareResult")
        windows = compare_stats.check(detail, str(plan.id), comp.pairs, comp.window_seconds, plan.target_pid)
    except (compare_stats.CompareInvalid, InvalidInput) as exc:
        return (None, f"the agent's comparison was refused: {exc}"[:4000]), None
    summary = compare_stats.summarize(windows)
    action = reason = None
    if comp.guard:
        slower = summary["verdict"] == "slower" and plan.state == "installed"
        action = "reverted" if slower else "kept"
        reason = compare_stats.guard_reason(summary, "reverted" if slower else "kept installed")
    kept = {k: v for k, v in detail.items() if k != "windows"}
    await db.execute(
        text("""
        UPDATE plan_comparisons SET state = 'done', windows = CAST(:w AS jsonb), summary = CAST(:s AS jsonb),
          agent_detail = CAST(:a AS jsonb), guard_action = :ga, guard_reason = :gr, finished_at = now()
        WHERE id = :id"""),
        {
            "id": comp.id,
            "w": orjson.dumps(windows).decode(),
            "s": orjson.dumps(summary).decode(),
            "a": orjson.dumps(kept).decode(),
            "ga": action,
            "gr": reason,
        },
    )
    figures = {k: summary[k] for k in ("verdict", "change", "interval", "share_original", "share_installed")}
    audit(db, f"agent:{plan.host_id}", "plan_compared", plan, command_id=str(cmd.id), **figures)
    if action is not None:
        audit(db, "system", "plan_guard_" + action, plan, reason=reason, **figures)
    answer = {"plan_id": str(plan.id), "verdict": summary["verdict"], "change": summary["change"]}
    return (answer, None), reason if action == "reverted" else None


async def on_end(db: AsyncSession, cmd: Row[Any]) -> None:
    """A comparison whose command failed or was cancelled is failed with the reason (a guarded one leaves
    the plan installed: the guard judges only what was measured)."""
    if cmd.state not in ("failed", "cancelled"):
        return
    why = (cmd.error or f"the command was {cmd.state}")[:4000]
    comp = (
        await db.execute(
            text("""
        UPDATE plan_comparisons SET state = 'failed', error = :e, finished_at = now(),
          guard_action = CASE WHEN guard THEN 'kept' END,
          guard_reason = CASE WHEN guard THEN 'guard: no comparison (' || :e || '); kept installed' END
        WHERE command_id = :c AND state = 'running' RETURNING *"""),
            {"c": cmd.id, "e": why},
        )
    ).first()
    if comp is None:
        return
    plan = (await db.execute(text(f"SELECT {RECORD} FROM plans WHERE id = :id"), {"id": comp.plan_id})).first()
    if plan is not None:
        audit(db, "system", "plan_compare_failed", plan, command_id=str(cmd.id), reason=why)
        if comp.guard:
            audit(db, "system", "plan_guard_kept", plan, reason=comp.guard_reason)


async def latest(db: AsyncSession, plan_id: uuid.UUID) -> dict[str, Any] | None:
    """The plan's latest comparison, with its command's progress while it runs and its pairs' shares."""
    r = (
        await db.execute(
            text("""
        SELECT c.*, cmd.progress, cmd.message FROM plan_comparisons c LEFT JOIN commands cmd ON cmd.id = c.command_id
        WHERE c.plan_id = :p ORDER BY c.created_at DESC, c.id LIMIT 1"""),
            {"p": plan_id},
        )
    ).first()
    if r is None:
        return None
    windows = r.windows or []
    return {
        "id": str(r.id),
        "command_id": str(r.command_id),
        "requested_by": r.requested_by,
        "guard": r.guard,
        "pairs": r.pairs,
        "window_seconds": r.window_seconds,
        "state": r.state,
        "progress": r.progress if r.state == "running" else None,
        "message": r.message if r.state == "running" else None,
        "error": r.error,
        "windows": windows,
        "pair_shares": compare_stats.pair_shares(windows),
        "summary": r.summary,
        "guard_action": r.guard_action,
        "guard_reason": r.guard_reason,
        "created_at": r.created_at,
        "finished_at": r.finished_at,
    }
