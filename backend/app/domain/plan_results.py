# SPDX-License-Identifier: Apache-2.0
"""What agents answer to plan commands (MakePlan, InstallPlan, RevertPlan, ListInstalled), checked and
applied inside the result's transaction; the handlers app.domain.plans registers with app.domain.commands.
"""

import logging
import uuid
from typing import Any

import orjson
from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.config import Settings
from app.domain import plan_check
from app.domain.commands import Answer
from app.domain.plan_records import RECORD, audit, is_hot_set
from app.gen.plan import Plan
from app.protocol.agent_input import InvalidInput
from app.protocol.proto import pb

log = logging.getLogger("hotpath.plans")


async def _identity_mismatch(db: AsyncSession, row: Row[Any], plan: Plan) -> str | None:
    """The plan's module and build id against what the agent reported for the target."""
    t = plan.target
    if t.kind == "kernel":
        kb = (await db.execute(text("SELECT kernel_build_id FROM hosts WHERE id = :h"), {"h": row.host_id})).scalar()
        if kb and t.build_id and kb != t.build_id:
            return f"the agent's plan was refused: it is for kernel build {t.build_id}, the host runs {kb}"
        return None
    if t.module:
        mb = (
            await db.execute(
                text("""
            SELECT build_id FROM host_modules WHERE host_id = :h AND target_id = :t AND name = :n"""),
                {"h": row.host_id, "t": row.target_id, "n": t.module},
            )
        ).scalar()
        if mb is None:
            return f"the agent's plan was refused: the target has no module {t.module}"
        if mb and mb != (t.module_build_id or ""):
            return (
                f"the agent's plan was refused: {t.module} has build id {mb} on the target, the plan says "
                f"{t.module_build_id}"
            )
    return None


async def _hot_set_root(db: AsyncSession, row: Row[Any], plan: Plan) -> tuple[str | None, tuple[str, int] | None]:
    """A hot set's root (the first function laid out) in the target's catalog: (why not, (digest, index))."""
    if plan.status != "ok":
        return None, None
    found = (
        await db.execute(
            text("""
        SELECT f.digest, f.index FROM host_modules hm JOIN functions f ON f.digest = hm.digest
        WHERE hm.host_id = :h AND hm.target_id = :t AND hm.name = :n AND f.name = :f
          AND (:d = '' OR hm.digest = :d)
        ORDER BY f.index LIMIT 1"""),
            {"h": row.host_id, "t": row.target_id, "n": plan.target.module or "", "f": plan.root, "d": row.root_digest},
        )
    ).first()
    if found is None:
        return f"the agent's plan was refused: its first function {plan.root} is not in the module asked for", None
    return None, (str(found[0]), int(found[1]))


async def on_plan_result(db: AsyncSession, settings: Settings, cmd: Row[Any], result: "pb.CommandResult") -> Answer:
    """Check a MakePlan answer and store the plan, or fail it with the reason; nothing unchecked is kept."""
    plan_id = uuid.UUID(cmd.params["plan_id"])
    row = (await db.execute(text(f"SELECT {RECORD} FROM plans WHERE id = :id FOR UPDATE"), {"id": plan_id})).first()
    if row is None or row.state != "planning":
        return None, "the plan this answers is not being made"
    if not result.ok:
        return None, None  # after_end records the agent's reason
    why: str | None = None
    if result.WhichOneof("kind") != "plan" or result.plan.plan_id != str(plan_id):
        why = "the agent's answer is not the plan asked for"
    else:
        pr = result.plan
        try:
            raw, plan = plan_check.check(
                pr.plan_json,
                root_name=None if is_hot_set(row) else row.root_name,
                target_id=row.target_id,
                code_sha256=pr.code_sha256,
                build_id=pr.build_id,
                max_bytes=settings.max_plan_bytes,
            )
        except plan_check.PlanInvalid as exc:
            why = f"the agent's plan was refused: {exc}"
        else:
            why = await _identity_mismatch(db, row, plan)
        root = (row.root_digest, row.root_function_index, row.root_name)
        if why is None and is_hot_set(row):
            why, found = await _hot_set_root(db, row, plan)
            if found is not None:
                root = (*found, plan.root)
        if why is None:
            t = plan.target
            state = "ready" if plan.status == "ok" else "failed"
            error = None if plan.status == "ok" else f"no plan ({plan.status}): {plan.message}"
            profile = raw.get("profile")
            estimated = bool(profile.get("estimated")) if isinstance(profile, dict) else False
            changed = (
                await db.execute(
                    text(f"""
                UPDATE plans SET state = :s, error = :e, plan_json = CAST(:j AS jsonb), plan_status = :ps,
                  estimated = :est, code_sha256 = :h, build_id = :b, target_pid = :pid, target_start_time = :st,
                  target_module = :mod, kernel_build_id = :kb, ready_at = now(), updated_at = now(),
                  root_digest = :rd, root_function_index = :ri, root_name = :rn
                WHERE id = :id RETURNING {RECORD}"""),
                    {
                        "id": plan_id,
                        "rd": root[0],
                        "ri": root[1],
                        "rn": root[2],
                        "s": state,
                        "e": error,
                        "j": orjson.dumps(raw).decode(),
                        "ps": plan.status,
                        "est": estimated,
                        "h": pr.code_sha256 or None,
                        "b": pr.build_id or None,
                        "pid": t.pid,
                        "st": t.start_time,
                        "mod": t.module,
                        "kb": t.build_id if t.kind == "kernel" else None,
                    },
                )
            ).one()
            audit(
                db,
                f"agent:{row.host_id}",
                "plan_ready" if state == "ready" else "plan_not_made",
                changed,
                status=plan.status,
            )
            return {"plan_id": str(plan_id), "status": plan.status, "code_sha256": pr.code_sha256}, None
    assert why is not None
    changed = (
        await db.execute(
            text(f"""
        UPDATE plans SET state = 'failed', error = :e, updated_at = now() WHERE id = :id RETURNING {RECORD}"""),
            {"id": plan_id, "e": why[:4000]},
        )
    ).one()
    audit(db, "system", "plan_refused", changed, reason=why[:4000])
    return None, why


def _detail_json(text_: str, what: str) -> dict[str, Any]:
    if len(text_) > 1 << 20:
        raise InvalidInput(f"{what}.detail_json is larger than 1 MiB")
    if not text_:
        return {}
    try:
        v = orjson.loads(text_)
    except orjson.JSONDecodeError:
        raise InvalidInput(f"{what}.detail_json is not JSON") from None
    if not isinstance(v, dict):
        raise InvalidInput(f"{what}.detail_json is not a JSON object")
    return v


async def on_install_result(db: AsyncSession, cmd: Row[Any], result: "pb.CommandResult") -> Answer:
    plan_id = uuid.UUID(cmd.params["plan_id"])
    row = (await db.execute(text(f"SELECT {RECORD} FROM plans WHERE id = :id FOR UPDATE"), {"id": plan_id})).first()
    if row is None or row.state != "installing":
        return None, "the plan this answers is not being installed"
    if not result.ok:
        return None, None
    if result.WhichOneof("kind") != "install" or result.install.plan_id != str(plan_id):
        return None, "the agent's answer is not this plan's install"
    detail = _detail_json(result.install.detail_json, "InstallResult")
    status = result.install.status
    if status != "installed":
        return None, f"the agent did not install it ({status}): {detail.get('error') or ''}".strip()
    changed = (
        await db.execute(
            text(f"""
        UPDATE plans SET state = 'installed', installed_at = now(), install_detail = CAST(:d AS jsonb),
          error = NULL, updated_at = now() WHERE id = :id RETURNING {RECORD}"""),
            {"id": plan_id, "d": orjson.dumps(detail).decode()},
        )
    ).one()
    audit(db, f"agent:{row.host_id}", "plan_installed", changed, status=status)
    return {"plan_id": str(plan_id), "status": status}, None


async def on_revert_result(db: AsyncSession, cmd: Row[Any], result: "pb.CommandResult") -> Answer:
    plan_id = uuid.UUID(cmd.params["plan_id"])
    row = (await db.execute(text(f"SELECT {RECORD} FROM plans WHERE id = :id FOR UPDATE"), {"id": plan_id})).first()
    if row is None or row.state != "reverting":
        return None, "the plan this answers is not being reverted"
    is_revert = result.WhichOneof("kind") == "install" and result.install.plan_id == str(plan_id)
    # The agent answers a revert of an id its journals do not hold as failed with `nothing_installed`
    # (a revert run again after its agent's start-up recovery finished it, or after the process exited):
    # nothing is installed, which reconciliation settles as reverted too (on_hello, _settle).
    if not result.ok and not (is_revert and result.install.status == "nothing_installed"):
        return None, None
    if not is_revert:
        return None, "the agent's answer is not this plan's revert"
    detail = _detail_json(result.install.detail_json, "InstallResult")
    status = result.install.status
    if status not in ("reverted", "reverted_heap_kept", "nothing_installed"):
        return None, f"the agent did not revert it ({status}): {detail.get('error') or ''}".strip()
    changed = (
        await db.execute(
            text(f"""
        UPDATE plans SET state = 'reverted', reverted_at = now(), revert_detail = CAST(:d AS jsonb),
          error = NULL, updated_at = now() WHERE id = :id RETURNING {RECORD}"""),
            {"id": plan_id, "d": orjson.dumps({**detail, "status": status}).decode()},
        )
    ).one()
    audit(db, f"agent:{row.host_id}", "plan_reverted", changed, status=status)
    return {"plan_id": str(plan_id), "status": status}, None


def on_list_result(result: "pb.CommandResult") -> Answer:
    """A ListInstalled answer: the agent's installs (from its journals), checked for shape."""
    if not result.ok:
        return None, None
    if result.WhichOneof("kind") != "install" or result.install.status != "listed":
        return None, "the agent's answer is not a list of installs"
    detail = _detail_json(result.install.detail_json, "InstallResult")
    listed = detail.get("installed")
    if not isinstance(listed, list) or not all(
        isinstance(x, dict) and isinstance(x.get("id"), str) and isinstance(x.get("state"), str) for x in listed
    ):
        return None, "the agent's list of installs is malformed (installed: [{id, state, ...}])"
    return {"installed": listed}, None


async def after_end(db: AsyncSession, cmd: Row[Any]) -> None:
    """A plan command that failed or was cancelled leaves its plan in the matching state."""
    if cmd.state not in ("failed", "cancelled"):
        return
    plan_id = uuid.UUID(cmd.params["plan_id"])
    why = cmd.error or f"the command was {cmd.state}"
    if cmd.kind == "make_plan":
        sql = (
            "UPDATE plans SET state = :s, error = coalesce(error, :e), updated_at = now() "
            f"WHERE id = :id AND state = 'planning' RETURNING {RECORD}"
        )
        params = {"s": "cancelled" if cmd.state == "cancelled" else "failed"}
        action = "plan_not_made"
    elif cmd.kind == "install_plan":
        sql = (
            "UPDATE plans SET state = 'install_failed', error = :e, updated_at = now() "
            f"WHERE id = :id AND state = 'installing' RETURNING {RECORD}"
        )
        params, action = {}, "plan_install_failed"
    elif cmd.kind == "revert_plan":
        sql = (
            "UPDATE plans SET state = 'installed', error = :e, updated_at = now() "
            f"WHERE id = :id AND state = 'reverting' RETURNING {RECORD}"
        )
        params, action = {}, "plan_revert_failed"
    else:
        return
    row = (await db.execute(text(sql), {"id": plan_id, "e": why[:4000], **params})).first()
    if row is not None:
        audit(db, "system", action, row, reason=why[:4000])
