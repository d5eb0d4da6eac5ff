# SPDX-License-Identifier: Apache-2.0
"""Code positioning plans and their approval workflow (KernInst's code positioning and replacement,
with an approval in front of every install).

A plan is made by the host's agent (the MakePlan command) for a root function of a target; the answer
is checked (app.domain.plan_check) before anything is stored. Its states:

    planning → ready | failed | cancelled
    ready → requested (an operator asks for approval)
    requested → approved | rejected (an approver who is not the requester decides, and an approval
                also needs someone other than the plan's maker; the approval pins the code hash and the
                build id)
    approved → installing (an operator installs: a measurement window before, InstallPlan with the
               approved hash, a window after) → installed | install_failed
    installing → installed | install_failed also by reconciliation, when the flow died with its backend
               (Plans.reconcile asks the agent's ListInstalled at start-up and periodically, and
               Plans.on_hello settles plans from the installs every Hello lists)
    installed  → reverted also by reconciliation from Hello, when the agent's journals no longer hold it
    installed → reverting → reverted (or back to installed with the revert's error)
    reverting  → reverted | installed also by reconciliation (Hello, and ListInstalled once the revert's
               answer is overdue), when the revert's answer was lost: settled from the agent's report
    ready, requested, approved, install_failed, installed → stale when the target exits or its pid,
               start time or build id no longer match the plan's.

Every transition is audited with who and when (action `plan_*`, target = the plan's id). Transitions
are single UPDATEs guarded by the state they leave, so two users racing see one succeed and the other
a 409.
"""
import asyncio
import hashlib
import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.core.config import Settings
from app.core.live import LiveHub
from app.domain import plan_check
from app.domain.commands import CommandError, Commands
from app.protocol.agent_input import InvalidInput
from app.storage import audit_log, measurements, samples

log = logging.getLogger("hotpath.plans")
STALE_FROM = ("ready", "requested", "approved", "install_failed", "installed")
FINAL = ("failed", "cancelled", "rejected", "reverted", "stale")
ACTIVE_COMMAND = ("queued", "sent", "running")
# The root's figures in the windows before and after an install (KernInst's Figure 4): calls, wall and
# virtualized time, and the hardware counters where the host has a PMU (asked with allow_partial, so a
# host without one reports them unavailable with its reason instead of refusing the window).
ROOT_METRICS = ["count", "wall", "vtime", "cycles", "instructions", "icache_stall", "branch_mispredict"]
# Per-call figures of a window: (figure, series slot, metric).
PER_CALL = (("wall_ns_per_call", "wall_ns", "wall"), ("vtime_ns_per_call", "vtime_ns", "vtime"),
            ("cycles_per_call", "cycles", "cycles"), ("instructions_per_call", "instructions", "instructions"),
            ("icache_stall_per_call", "icache_stall", "icache_stall"),
            ("branch_mispredict_per_call", "branch_mispredict", "branch_mispredict"))
FIGURES = ("calls_per_s", *(f for f, _, _ in PER_CALL))


class PlanError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def publish_state(hub, host_id: str, plan_id: str, state: str) -> None:
    """Tell the consoles showing the host that one of its plans changed state, once the change is
    committed: an approval shows on the requester's open page at once, not at its next poll."""
    hub.publish(f"host:{host_id}", {"type": "plan", "host_id": host_id, "plan_id": str(plan_id), "state": state})


def _members(plan_json) -> list[str]:
    """The group's function names, root first (the plan was checked when stored: plan_check)."""
    group = plan_json.get("group") if isinstance(plan_json, dict) else None
    return [g["function"] for g in group or () if isinstance(g, dict) and isinstance(g.get("function"), str)]


def public(r, detail: bool = False) -> dict[str, Any]:
    out = {"id": str(r.id), "host_id": r.host_id, "target_id": r.target_id, "root_digest": r.root_digest,
           "root_function_index": r.root_function_index, "root_name": r.root_name, "options": r.options,
           "state": r.state, "error": r.error, "plan_status": r.plan_status, "estimated": r.estimated,
           "code_sha256": r.code_sha256, "build_id": r.build_id, "target_pid": r.target_pid,
           "target_start_time": r.target_start_time, "target_module": r.target_module,
           "kernel_build_id": r.kernel_build_id,
           "make_command": str(r.make_command) if r.make_command else None,
           "created_by": r.created_by, "created_at": r.created_at, "ready_at": r.ready_at,
           "requested_by": r.requested_by, "requested_at": r.requested_at, "approved_by": r.approved_by,
           "approved_at": r.approved_at, "approved_code_sha256": r.approved_code_sha256,
           "approved_build_id": r.approved_build_id, "rejected_by": r.rejected_by, "rejected_at": r.rejected_at,
           "reject_reason": r.reject_reason, "install_by": r.install_by, "installed_at": r.installed_at,
           "revert_by": r.revert_by, "reverted_at": r.reverted_at, "stale_reason": r.stale_reason,
           "window_s": r.window_s, "before_measurement": r.before_measurement,
           "after_measurement": r.after_measurement, "updated_at": r.updated_at,
           "members": _members(r.plan_json)}
    if detail:
        out["plan"] = r.plan_json
        out["install_detail"] = r.install_detail
        out["revert_detail"] = r.revert_detail
        out["install_command"] = str(r.install_command) if r.install_command else None
        out["revert_command"] = str(r.revert_command) if r.revert_command else None
    return out


def _audit(db, actor: str, action: str, row, **extra) -> None:
    audit_log.record(db, actor, action, str(row.id), {"plan_id": str(row.id), "host_id": row.host_id,
                                                  "root": row.root_name, "code_sha256": row.code_sha256, **extra})


async def _row(db, host_id: str, plan_id: uuid.UUID, lock: bool = False):
    return (await db.execute(text("SELECT * FROM plans WHERE id = :id AND host_id = :h"
                                  + (" FOR UPDATE" if lock else "")), {"id": plan_id, "h": host_id})).first()


# Staleness -------------------------------------------------------------------------------------

async def stale_reason(db, row) -> str | None:
    """Why a plan no longer fits its target (None: it still does)."""
    t = (await db.execute(text("SELECT state, pid FROM host_targets WHERE host_id = :h AND id = :t"),
                          {"h": row.host_id, "t": row.target_id})).first()
    if t is None:
        return f"the target {row.target_id} is gone"
    if t.state != "attached":
        return f"the target {row.target_id} has {t.state}" + (" (the installed copy went with it)"
                                                              if row.state == "installed" else "")
    if row.target_id == "kernel":
        kb = (await db.execute(text("SELECT kernel_build_id FROM hosts WHERE id = :h"), {"h": row.host_id})).scalar()
        if row.kernel_build_id and kb and kb != row.kernel_build_id:
            return f"the kernel's build id is {kb} now, not {row.kernel_build_id}"
        return None
    if row.target_pid is not None and row.target_id != f"p{row.target_pid}-{row.target_start_time}":
        return f"the plan is for pid {row.target_pid} started at {row.target_start_time}, not {row.target_id}"
    if row.target_module and row.build_id:
        mb = (await db.execute(text("""
            SELECT build_id FROM host_modules WHERE host_id = :h AND target_id = :t AND name = :n"""),
            {"h": row.host_id, "t": row.target_id, "n": row.target_module})).scalar()
        if mb is not None and mb and mb != row.build_id:
            return f"{row.target_module} has build id {mb} now, not {row.build_id}"
    return None


async def refresh_stale(db, host_id: str, plan_id: uuid.UUID | None = None) -> None:
    """Mark the host's plans that no longer fit their target stale (audited); the caller commits."""
    rows = (await db.execute(text("SELECT * FROM plans WHERE host_id = :h AND state = ANY(:s)"
                                  + (" AND id = :id" if plan_id else "")),
                             {"h": host_id, "s": list(STALE_FROM), "id": plan_id})).all()
    for r in rows:
        why = await stale_reason(db, r)
        if why is None:
            continue
        changed = (await db.execute(text("""
            UPDATE plans SET state = 'stale', stale_reason = :w, updated_at = now()
            WHERE id = :id AND state = :s RETURNING *"""), {"id": r.id, "s": r.state, "w": why})).first()
        if changed is not None:
            _audit(db, "system", "plan_stale", changed, reason=why, was=r.state)


# What agents answer (called by app.domain.commands inside the result's transaction) ---------------------

async def _identity_mismatch(db: AsyncSession, row, plan) -> str | None:
    """The plan's module and build id against what the agent reported for the target."""
    t = plan.target
    if t.kind == "kernel":
        kb = (await db.execute(text("SELECT kernel_build_id FROM hosts WHERE id = :h"), {"h": row.host_id})).scalar()
        if kb and t.build_id and kb != t.build_id:
            return f"the agent's plan was refused: it is for kernel build {t.build_id}, the host runs {kb}"
        return None
    if t.module:
        mb = (await db.execute(text("""
            SELECT build_id FROM host_modules WHERE host_id = :h AND target_id = :t AND name = :n"""),
            {"h": row.host_id, "t": row.target_id, "n": t.module})).scalar()
        if mb is None:
            return f"the agent's plan was refused: the target has no module {t.module}"
        if mb and mb != (t.module_build_id or ""):
            return (f"the agent's plan was refused: {t.module} has build id {mb} on the target, the plan says "
                    f"{t.module_build_id}")
    return None


async def on_plan_result(db: AsyncSession, settings, cmd, result) -> tuple[dict | None, str | None]:
    """Check a MakePlan answer and store the plan, or fail it with the reason; nothing unchecked is kept."""
    plan_id = uuid.UUID(cmd.params["plan_id"])
    row = (await db.execute(text("SELECT * FROM plans WHERE id = :id FOR UPDATE"), {"id": plan_id})).first()
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
            raw, plan = plan_check.check(pr.plan_json, root_name=row.root_name, target_id=row.target_id,
                                         code_sha256=pr.code_sha256, build_id=pr.build_id,
                                         max_bytes=settings.max_plan_bytes)
        except plan_check.PlanInvalid as exc:
            why = f"the agent's plan was refused: {exc}"
        else:
            why = await _identity_mismatch(db, row, plan)
        if why is None:
            t = plan.target
            state = "ready" if plan.status == "ok" else "failed"
            error = None if plan.status == "ok" else f"no plan ({plan.status}): {plan.message}"
            profile = raw.get("profile")
            estimated = bool(profile.get("estimated")) if isinstance(profile, dict) else False
            changed = (await db.execute(text("""
                UPDATE plans SET state = :s, error = :e, plan_json = CAST(:j AS jsonb), plan_status = :ps,
                  estimated = :est, code_sha256 = :h, build_id = :b, target_pid = :pid, target_start_time = :st,
                  target_module = :mod, kernel_build_id = :kb, ready_at = now(), updated_at = now()
                WHERE id = :id RETURNING *"""),
                {"id": plan_id, "s": state, "e": error, "j": orjson.dumps(raw).decode(), "ps": plan.status,
                 "est": estimated, "h": pr.code_sha256 or None, "b": pr.build_id or None, "pid": t.pid,
                 "st": t.start_time, "mod": t.module, "kb": t.build_id if t.kind == "kernel" else None})).one()
            _audit(db, f"agent:{row.host_id}", "plan_ready" if state == "ready" else "plan_not_made", changed,
                   status=plan.status)
            return {"plan_id": str(plan_id), "status": plan.status, "code_sha256": pr.code_sha256}, None
    assert why is not None
    changed = (await db.execute(text("""
        UPDATE plans SET state = 'failed', error = :e, updated_at = now() WHERE id = :id RETURNING *"""),
        {"id": plan_id, "e": why[:4000]})).one()
    _audit(db, "system", "plan_refused", changed, reason=why[:4000])
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


async def on_install_result(db: AsyncSession, cmd, result) -> tuple[dict | None, str | None]:
    plan_id = uuid.UUID(cmd.params["plan_id"])
    row = (await db.execute(text("SELECT * FROM plans WHERE id = :id FOR UPDATE"), {"id": plan_id})).first()
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
    changed = (await db.execute(text("""
        UPDATE plans SET state = 'installed', installed_at = now(), install_detail = CAST(:d AS jsonb),
          error = NULL, updated_at = now() WHERE id = :id RETURNING *"""),
        {"id": plan_id, "d": orjson.dumps(detail).decode()})).one()
    _audit(db, f"agent:{row.host_id}", "plan_installed", changed, status=status)
    return {"plan_id": str(plan_id), "status": status}, None


async def on_revert_result(db: AsyncSession, cmd, result) -> tuple[dict | None, str | None]:
    plan_id = uuid.UUID(cmd.params["plan_id"])
    row = (await db.execute(text("SELECT * FROM plans WHERE id = :id FOR UPDATE"), {"id": plan_id})).first()
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
    changed = (await db.execute(text("""
        UPDATE plans SET state = 'reverted', reverted_at = now(), revert_detail = CAST(:d AS jsonb),
          error = NULL, updated_at = now() WHERE id = :id RETURNING *"""),
        {"id": plan_id, "d": orjson.dumps({**detail, "status": status}).decode()})).one()
    _audit(db, f"agent:{row.host_id}", "plan_reverted", changed, status=status)
    return {"plan_id": str(plan_id), "status": status}, None


def on_list_result(result) -> tuple[dict | None, str | None]:
    """A ListInstalled answer: the agent's installs (from its journals), checked for shape."""
    if not result.ok:
        return None, None
    if result.WhichOneof("kind") != "install" or result.install.status != "listed":
        return None, "the agent's answer is not a list of installs"
    detail = _detail_json(result.install.detail_json, "InstallResult")
    listed = detail.get("installed")
    if not isinstance(listed, list) or not all(isinstance(x, dict) and isinstance(x.get("id"), str) and
                                               isinstance(x.get("state"), str) for x in listed):
        return None, "the agent's list of installs is malformed (installed: [{id, state, ...}])"
    return {"installed": listed}, None


async def after_end(db: AsyncSession, cmd) -> None:
    """A plan command that failed or was cancelled leaves its plan in the matching state."""
    if cmd.state not in ("failed", "cancelled"):
        return
    plan_id = uuid.UUID(cmd.params["plan_id"])
    why = cmd.error or f"the command was {cmd.state}"
    if cmd.kind == "make_plan":
        sql = ("UPDATE plans SET state = :s, error = coalesce(error, :e), updated_at = now() "
               "WHERE id = :id AND state = 'planning' RETURNING *")
        params = {"s": "cancelled" if cmd.state == "cancelled" else "failed"}
        action = "plan_not_made"
    elif cmd.kind == "install_plan":
        sql = ("UPDATE plans SET state = 'install_failed', error = :e, updated_at = now() "
               "WHERE id = :id AND state = 'installing' RETURNING *")
        params, action = {}, "plan_install_failed"
    elif cmd.kind == "revert_plan":
        sql = ("UPDATE plans SET state = 'installed', error = :e, updated_at = now() "
               "WHERE id = :id AND state = 'reverting' RETURNING *")
        params, action = {}, "plan_revert_failed"
    else:
        return
    row = (await db.execute(text(sql), {"id": plan_id, "e": why[:4000], **params})).first()
    if row is not None:
        _audit(db, "system", action, row, reason=why[:4000])


async def _reconciled(db: AsyncSession, new, command: uuid.UUID | None, why: str, was: str) -> int:
    """Close a reconciliation: the command whose answer was lost fails with the reason, the step is
    audited and committed."""
    if command is not None:
        await db.execute(text("""
            UPDATE commands SET state = 'failed', finished_at = now(), error = :e
            WHERE id = :c AND state IN ('sent', 'running')"""), {"c": command, "e": f"its answer was lost: {why}"})
    _audit(db, "system", "plan_reconciled", new, result=new.state, reason=why, was=was)
    await db.commit()
    log.info("plan %s reconciled: %s (%s)", new.id, new.state, why)
    return 1


async def _settle_reverting(db: AsyncSession, row, entry: dict | None, source: str):
    """A `reverting` plan whose RevertPlan answer is lost, settled from what the agent reports of it
    (`entry`: its listing in `source`, or None when not listed): no longer installed (not listed, or
    listed with a kept heap or a gone process) → `reverted`; still installed → `installed` again, with
    the error that the revert did not complete. Returns (the changed row, the reason)."""
    if entry is None or entry.get("state") in ("heap_kept", "process_gone"):
        why = ("settled from the agent's report: " +
               (f"{source} does not list the plan (the revert finished, the agent's start-up recovery "
                "finished it, or its process exited)" if entry is None else
                f"{source} lists the plan as {entry.get('state')}"))
        new = (await db.execute(text("""
            UPDATE plans SET state = 'reverted', reverted_at = now(), revert_detail = CAST(:d AS jsonb),
              error = NULL, updated_at = now()
            WHERE id = :id RETURNING *"""),
            {"id": row.id, "d": orjson.dumps({"status": "reconciled", "reason": why, "listed": entry}).decode()})).one()
    else:
        why = f"the revert did not complete: {source} still lists the plan as installed"
        new = (await db.execute(text("""
            UPDATE plans SET state = 'installed', error = :e, updated_at = now()
            WHERE id = :id RETURNING *"""), {"id": row.id, "e": why})).one()
    return new, why


# The workflow ---------------------------------------------------------------------------------

UNKNOWN_INSTALLS_NAMED = 16  # ids an unknown-installs audit row names; the count says how many there were


async def _audit_unknown_installs(db: AsyncSession, host_id: str, ids: list[str]) -> None:
    """Audit the installs a Hello lists that no plan of the host has: ONE row per host naming how many and
    the first few ids (an agent may list 1024), and only when the set differs from the one this host's
    last such row named (the fingerprint of the sorted ids), so reconnects with the same list add none."""
    if not ids:
        return
    fingerprint = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    last = (await db.execute(text("""
        SELECT detail->>'ids_sha256' FROM audit_log
        WHERE action = 'plan_install_unknown' AND actor = :a AND target = :h ORDER BY id DESC LIMIT 1"""),
        {"a": f"agent:{host_id}", "h": host_id})).scalar_one_or_none()
    if last == fingerprint:
        return
    audit_log.record(db, f"agent:{host_id}", "plan_install_unknown", host_id,
               {"host_id": host_id, "count": len(ids), "plan_ids": ids[:UNKNOWN_INSTALLS_NAMED],
                "ids_sha256": fingerprint, "reason": "no plan of this host has these ids"})
    log.warning("host %s lists %d installs that no plan of it has (%s%s)", host_id, len(ids),
                ", ".join(ids[:3]), ", ..." if len(ids) > 3 else "")


class Plans:
    def __init__(self, settings: Settings, sessionmaker: async_sessionmaker[AsyncSession], hub: LiveHub,
                 commands: Commands) -> None:
        self.settings = settings
        self.sessionmaker = sessionmaker
        self.hub = hub
        self.commands = commands
        self.tasks: dict[str, asyncio.Task] = {}
        plan_kind = {"on_end": after_end, "published": self._published}

        async def made(db: AsyncSession, session: Any, row: Any, result: Any) -> tuple[dict | None, str | None]:
            return await on_plan_result(db, settings, row, result)

        async def installed(db: AsyncSession, session: Any, row: Any, result: Any) -> tuple[dict | None, str | None]:
            return await on_install_result(db, row, result)

        async def reverted(db: AsyncSession, session: Any, row: Any, result: Any) -> tuple[dict | None, str | None]:
            return await on_revert_result(db, row, result)

        async def listed(db: AsyncSession, session: Any, row: Any, result: Any) -> tuple[dict | None, str | None]:
            return on_list_result(result)

        commands.handle("make_plan", made, **plan_kind)
        commands.handle("install_plan", installed, payload=self._plan_json, **plan_kind)
        commands.handle("revert_plan", reverted, **plan_kind)
        commands.handle("list_installed", listed)

    async def _plan_json(self, cmd: Any) -> str:
        """What an install carries: the plan as the backend checked and stored it; the agent recomputes
        its hash and refuses it unless it is the approved one."""
        async with self.sessionmaker() as db:
            stored = (await db.execute(text("SELECT plan_json FROM plans WHERE id = :id"),
                                       {"id": uuid.UUID(cmd.params["plan_id"])})).scalar()
        return orjson.dumps(stored).decode() if stored is not None else ""

    async def _published(self, host_id: str, cmd: Any) -> None:
        """A plan command's answer moved its plan (ready, installed, reverted, failed): say so live."""
        if not (isinstance(cmd.params, dict) and cmd.params.get("plan_id")):
            return
        plan_id = cmd.params["plan_id"]
        async with self.sessionmaker() as db:
            state = (await db.execute(text("SELECT state FROM plans WHERE id = CAST(:id AS uuid) AND host_id = :h"),
                                      {"id": plan_id, "h": host_id})).scalar()
        if state is not None:
            publish_state(self.hub, host_id, plan_id, state)

    async def create(self, db: AsyncSession, host_id: str, body, actor: str) -> tuple[dict, bool]:
        state = (await db.execute(text("SELECT state FROM host_targets WHERE host_id = :h AND id = :t"),
                                  {"h": host_id, "t": body.target})).scalar()
        if state is None:
            raise PlanError(404, "Target not found")
        if state != "attached":
            raise PlanError(409, f"The target has ended ({state})")
        if body.function_id is not None:
            named = (await db.execute(text("SELECT digest, index FROM functions WHERE id = :i"),
                                      {"i": body.function_id})).first()
            if named is None:
                raise PlanError(404, "Function not found")
            body.digest, body.function_index = named.digest, named.index
        fn = (await db.execute(text("""
            SELECT f.name FROM functions f JOIN host_modules hm ON hm.digest = f.digest
            WHERE hm.host_id = :h AND hm.target_id = :t AND f.digest = :d AND f.index = :i LIMIT 1"""),
            {"h": host_id, "t": body.target, "d": body.digest, "i": body.function_index})).scalar()
        if fn is None:
            raise PlanError(404, "The target has no such function (module digest and function index)")
        plan_id = body.plan_id or uuid.uuid4()
        have = await _row(db, host_id, plan_id)
        if have is not None:
            return public(have), False
        options = {"seconds": body.seconds, "join_fraction": body.join_fraction,
                   "stall_threshold": body.stall_threshold, "max_functions": body.max_functions,
                   "measurement_id": body.measurement_id}
        params = {"plan_id": str(plan_id), "target": body.target, "digest": body.digest,
                  "function_index": body.function_index, **options}
        try:
            cmd, _ = await self.commands.create(db, host_id, "make_plan", params, actor)
        except CommandError as exc:
            raise PlanError(exc.status, exc.detail) from None
        row = (await db.execute(text("""
            INSERT INTO plans (id, host_id, target_id, root_digest, root_function_index, root_name, options, state,
                               make_command, created_by)
            VALUES (:id, :h, :t, :d, :i, :n, CAST(:o AS jsonb), 'planning', :c, :by) RETURNING *"""),
            {"id": plan_id, "h": host_id, "t": body.target, "d": body.digest, "i": body.function_index, "n": fn,
             "o": orjson.dumps(options).decode(), "c": uuid.UUID(cmd["id"]), "by": actor})).one()
        _audit(db, actor, "plan_create", row, target=body.target)
        return public(row), True

    async def _transition(self, db: AsyncSession, host_id: str, plan_id: uuid.UUID, frm: tuple[str, ...],
                          sql_set: str, params: dict, actor: str, action: str, check=None, **extra) -> dict:
        await refresh_stale(db, host_id, plan_id)
        row = await _row(db, host_id, plan_id, lock=True)
        if row is None:
            raise PlanError(404, "Plan not found")
        if row.state not in frm:
            why = f" ({row.stale_reason})" if row.state == "stale" else ""
            raise PlanError(409, f"The plan is {row.state}{why}; this needs it {' or '.join(frm)}")
        if check is not None:
            check(row)
        changed = (await db.execute(text(f"UPDATE plans SET {sql_set}, updated_at = now() "
                                         f"WHERE id = :id AND state = :was RETURNING *"),
                                    {"id": plan_id, "was": row.state, **params})).one()
        _audit(db, actor, action, changed, was=row.state, **extra)
        return public(changed, detail=True)

    async def request(self, db, host_id, plan_id, actor: str) -> dict:
        return await self._transition(db, host_id, plan_id, ("ready",),
                                      "state = 'requested', requested_by = :by, requested_at = now()",
                                      {"by": actor}, actor, "plan_request")

    async def approve(self, db, host_id, plan_id, actor: str) -> dict:
        def check(row):
            # Two people: the approver is neither the requester nor the plan's maker (a maker who got a
            # colleague to request must still find a third person to approve).
            if row.requested_by == actor:
                raise PlanError(403, "The requester cannot approve their own request: another approver must")
            if row.created_by == actor:
                raise PlanError(403, "The plan's maker cannot approve it: an approver who neither made nor "
                                     "requested it must")
            if not row.code_sha256:
                raise PlanError(409, "The plan has no code to approve")
        return await self._transition(db, host_id, plan_id, ("requested",),
                                      "state = 'approved', approved_by = :by, approved_at = now(), "
                                      "approved_code_sha256 = code_sha256, approved_build_id = build_id",
                                      {"by": actor}, actor, "plan_approve", check)

    async def reject(self, db, host_id, plan_id, actor: str, reason: str) -> dict:
        def check(row):
            if row.requested_by == actor:
                raise PlanError(403, "The requester cannot decide their own request: another approver must")
        return await self._transition(db, host_id, plan_id, ("requested",),
                                      "state = 'rejected', rejected_by = :by, rejected_at = now(), "
                                      "reject_reason = :r", {"by": actor, "r": reason}, actor, "plan_reject",
                                      check, reason=reason)

    async def install(self, db, host_id, plan_id, actor: str, window_s: int) -> dict:
        def check(row):
            if not row.approved_by or row.approved_code_sha256 != row.code_sha256 or \
                    row.approved_build_id != row.build_id:
                raise PlanError(409, "The plan's code or build id is not the one approved")
        out = await self._transition(db, host_id, plan_id, ("approved",),
                                     "state = 'installing', install_by = :by, window_s = :w, error = NULL",
                                     {"by": actor, "w": window_s}, actor, "plan_install_requested", check,
                                     window_s=window_s)
        await db.commit()
        self._spawn(host_id, plan_id, actor)
        return out

    async def revert(self, db, host_id, plan_id, actor: str) -> dict:
        await refresh_stale(db, host_id, plan_id)
        row = await _row(db, host_id, plan_id, lock=True)
        if row is None:
            raise PlanError(404, "Plan not found")
        if row.state != "installed":
            raise PlanError(409, f"The plan is {row.state}; only an installed plan is reverted")
        try:
            cmd, _ = await self.commands.create(db, host_id, "revert_plan",
                                                        {"plan_id": str(plan_id), "target": row.target_id}, actor)
        except CommandError as exc:
            raise PlanError(exc.status, exc.detail) from None
        changed = (await db.execute(text("""
            UPDATE plans SET state = 'reverting', revert_by = :by, revert_command = :c, updated_at = now()
            WHERE id = :id AND state = 'installed' RETURNING *"""),
            {"id": plan_id, "by": actor, "c": uuid.UUID(cmd["id"])})).one()
        _audit(db, actor, "plan_revert_requested", changed)
        return public(changed, detail=True)

    # Install: a window before, the install, a window after --------------------------------------

    def _spawn(self, host_id: str, plan_id: uuid.UUID, actor: str) -> None:
        task = asyncio.create_task(self._install_flow(host_id, plan_id, actor), name=f"install-{plan_id}")
        self.tasks[str(plan_id)] = task
        task.add_done_callback(lambda _t: self.tasks.pop(str(plan_id), None))

    async def _window(self, host_id: str, row, which: str, actor: str) -> str | None:
        """Measure the root for the plan's window (count, wall and vtime); the measurement's id, or None
        when it could not start (its failure is on the measurement)."""
        mid = str(uuid.uuid4())
        request = {"measurement_id": mid, "target": row.target_id, "metrics": ROOT_METRICS,
                   "resources": [{"digest": row.root_digest, "function_index": row.root_function_index,
                                  "kind": "function", "offset": 0, "blocks": False}],
                   "where_pid": None, "where_comm": None, "where_cgroup": None, "interval_ms": 1000,
                   "allow_partial": True}
        cmds = self.commands
        async with self.sessionmaker() as db:
            cmd, _ = await cmds.create(db, host_id, "start_measurement", request, actor)
            await measurements.create(db, mid, host_id, request, 1000, actor, uuid.UUID(cmd["id"]))
            await db.execute(text(f"UPDATE plans SET {which}_measurement = :m, updated_at = now() WHERE id = :id"),
                             {"m": mid, "id": row.id})
            await db.commit()
        started = await cmds.wait(cmd["id"], 60)
        if started is None or started["state"] != "done":
            return mid
        await asyncio.sleep(row.window_s or 5)
        async with self.sessionmaker() as db:
            stop, _ = await cmds.create(db, host_id, "stop_measurement", {"measurement_id": mid}, actor)
            await db.commit()
        await cmds.wait(stop["id"], 60)
        # The window's figures are final now: open plan pages refresh at once.
        async with self.sessionmaker() as db:
            state = (await db.execute(text("SELECT state FROM plans WHERE id = :id"), {"id": row.id})).scalar()
        if state is not None:
            publish_state(self.hub, host_id, str(row.id), state)
        return mid

    async def _install_flow(self, host_id: str, plan_id: uuid.UUID, actor: str) -> None:
        try:
            async with self.sessionmaker() as db:
                row = await _row(db, host_id, plan_id)
            await self._window(host_id, row, "before", actor)
            async with self.sessionmaker() as db:
                row = await _row(db, host_id, plan_id, lock=True)
                if row is None or row.state != "installing":
                    await db.rollback()
                    return
                why = await stale_reason(db, row)
                if why is not None:
                    await db.execute(text("""UPDATE plans SET state = 'stale', stale_reason = :w, updated_at = now()
                                             WHERE id = :id"""), {"id": plan_id, "w": why})
                    _audit(db, "system", "plan_stale", row, reason=why, was="installing")
                    await db.commit()
                    return
                cmd, _ = await self.commands.create(
                    db, host_id, "install_plan", {"plan_id": str(plan_id), "target": row.target_id,
                                                  "approved_code_sha256": row.approved_code_sha256,
                                                  "entry_only": False}, actor)
                await db.execute(text("UPDATE plans SET install_command = :c WHERE id = :id"),
                                 {"c": uuid.UUID(cmd["id"]), "id": plan_id})
                await db.commit()
            done = await self.commands.wait(cmd["id"], self.settings.plan_install_timeout_s)
            if done is None or done["state"] != "done":
                return
            async with self.sessionmaker() as db:
                row = await _row(db, host_id, plan_id)
            if row is not None and row.state == "installed":
                await self._window(host_id, row, "after", actor)
        except Exception:  # noqa: BLE001 - the plan says what happened; the flow must not die silently
            log.exception("plan %s: the install flow failed", plan_id)
            async with self.sessionmaker() as db:
                row = (await db.execute(text("""
                    UPDATE plans SET state = 'install_failed', error = 'the backend could not run the install',
                      updated_at = now() WHERE id = :id AND state = 'installing' AND install_command IS NULL
                    RETURNING *"""), {"id": plan_id})).first()
                if row is not None:
                    _audit(db, "system", "plan_install_failed", row, reason="backend error")
                await db.commit()

    # Reconciliation: plans an install flow left installing ---------------------------------------

    async def reconcile(self) -> int:
        """Settle plans left `installing` by a flow that no longer runs (the backend was stopped or died
        during it), and plans left `reverting` by a RevertPlan whose answer never came, from what the
        host's agent says is installed (ListInstalled). An `installing` candidate is a plan whose flow is
        not running here and that is older than its window plus the grace: either its InstallPlan was
        never sent, or it was sent and its answer has not come (lost with the stream). A `reverting`
        candidate is older than the grace and its RevertPlan was sent more than the grace ago and not
        answered. The agent runs commands one at a time, so its list answers after any install or revert
        it was given: a plan being installed that it lists as installed becomes `installed`, one it does
        not list `install_failed`; a plan being reverted that it does not list becomes `reverted`, one it
        still lists as installed `installed` again with the error that the revert did not complete. Each
        is audited (`plan_reconciled`). Hosts offline are left for a later round. Returns how many
        changed."""
        s = self.settings
        async with self.sessionmaker() as db:
            rows = (await db.execute(text("""
                SELECT p.id, p.host_id, p.state, p.install_command, p.revert_command FROM plans p
                JOIN hosts h ON h.id = p.host_id
                LEFT JOIN commands c ON c.id = p.install_command
                LEFT JOIN commands rc ON rc.id = p.revert_command
                WHERE h.online AND (
                  (p.state = 'installing'
                   AND p.updated_at < now() - make_interval(secs => coalesce(p.window_s, 5) + :g)
                   AND (p.install_command IS NULL OR c.state IS NULL OR c.state <> 'queued')
                   AND (c.sent_at IS NULL OR c.sent_at < now() - make_interval(secs => :g)))
                  OR (p.state = 'reverting'
                   AND p.updated_at < now() - make_interval(secs => :g)
                   AND (rc.state IS NULL OR rc.state <> 'queued')
                   AND (rc.sent_at IS NULL OR rc.sent_at < now() - make_interval(secs => :g))))"""),
                {"g": s.plan_reconcile_grace_s})).all()
        rows = [r for r in rows if str(r.id) not in self.tasks]
        await self._stop_orphan_windows()
        changed = 0
        for host_id in sorted({r.host_id for r in rows}):
            listed = await self._list_installed(host_id)
            if listed is None:
                continue
            for r in (x for x in rows if x.host_id == host_id):
                changed += await self._settle(r, listed)
        return changed

    async def _stop_orphan_windows(self) -> None:
        """A flow that died in a measurement window leaves that measurement running on the agent: stop the
        windows of plans no flow here runs, once older than the window plus the grace (audited as the
        stop command, actor system)."""
        g = self.settings.plan_reconcile_grace_s
        async with self.sessionmaker() as db:
            rows = (await db.execute(text("""
                SELECT p.id AS plan_id, m.id AS mid, m.host_id FROM plans p
                JOIN measurements m ON m.id IN (p.before_measurement, p.after_measurement)
                JOIN hosts h ON h.id = m.host_id
                WHERE m.state IN ('armed', 'running') AND h.online
                  AND p.updated_at < now() - make_interval(secs => coalesce(p.window_s, 5) + :g)
                  AND coalesce(m.started_at, m.created_at)
                      < now() - make_interval(secs => coalesce(p.window_s, 5) + :g)
                  AND NOT EXISTS (
                    SELECT 1 FROM commands c WHERE c.host_id = m.host_id AND c.kind = 'stop_measurement'
                      AND c.params->>'measurement_id' = m.id AND c.state IN ('queued', 'sent', 'running'))"""),
                {"g": g})).all()
            stopped = 0
            for r in rows:
                if str(r.plan_id) in self.tasks:
                    continue
                await self.commands.create(db, r.host_id, "stop_measurement", {"measurement_id": r.mid},
                                                   "system")
                stopped += 1
            if stopped:
                log.info("reconcile: stopping %d measurement window(s) their install flow left running", stopped)
            await db.commit()

    async def _list_installed(self, host_id: str) -> dict[str, dict] | None:
        try:
            async with self.sessionmaker() as db:
                cmd, _ = await self.commands.create(db, host_id, "list_installed", {}, "system")
                await db.commit()
        except CommandError:
            return None
        done = await self.commands.wait(cmd["id"], 60)
        if done is None or done["state"] != "done" or not done["result"]:
            log.warning("reconcile: host %s did not list its installs (%s)", host_id,
                        (done or {}).get("error") or "no answer in 60 s")
            return None
        return {x["id"]: x for x in done["result"]["installed"]}

    async def _settle(self, r, listed: dict[str, dict]) -> int:
        if r.state == "reverting":
            return await self._settle_revert(r, listed)
        entry = listed.get(str(r.id))
        async with self.sessionmaker() as db:
            row = await _row(db, r.host_id, r.id, lock=True)
            if row is None or row.state != "installing" or row.install_command != r.install_command:
                return 0
            if entry is not None and entry.get("state") not in ("installed",):
                return 0  # the agent is still on it, or recovering it at start-up: a later round
            lost = "the backend stopped during the install flow"
            if entry is not None:
                new = (await db.execute(text("""
                    UPDATE plans SET state = 'installed', installed_at = coalesce(installed_at, now()),
                      install_detail = CAST(:d AS jsonb), error = NULL, updated_at = now()
                    WHERE id = :id RETURNING *"""), {"id": r.id, "d": orjson.dumps(entry).decode()})).one()
                why = f"{lost}; the agent lists the plan as installed"
            else:
                why = (f"{lost} before it sent the install" if r.install_command is None else
                       f"{lost} and the install's answer was lost; the agent does not list the plan as installed")
                new = (await db.execute(text("""
                    UPDATE plans SET state = 'install_failed', error = :e, updated_at = now()
                    WHERE id = :id RETURNING *"""), {"id": r.id, "e": why})).one()
            return await _reconciled(db, new, r.install_command, why, "installing")

    async def _settle_revert(self, r, listed: dict[str, dict]) -> int:
        """A plan left `reverting` by a RevertPlan whose answer did not come, from the agent's list (which
        answers after the revert, if the agent was given it)."""
        entry = listed.get(str(r.id))
        async with self.sessionmaker() as db:
            row = await _row(db, r.host_id, r.id, lock=True)
            if row is None or row.state != "reverting" or row.revert_command != r.revert_command:
                return 0
            if entry is not None and entry.get("state") not in ("installed", "heap_kept", "process_gone"):
                return 0  # the agent is still on it, or finishing it at start-up: a later round
            new, why = await _settle_reverting(db, row, entry, "its ListInstalled")
            return await _reconciled(db, new, r.revert_command, why, "reverting")

    # Reconciliation from Hello: what the agent's journals hold on every connect ----------------------

    async def on_hello(self, host_id: str, installs) -> int:
        """Settle this host's plans from Hello.installs (checked for shape by agent_input.check_installs): the
        installs the agent's journals hold after its start-up recovery; called only when Hello says the list
        is complete (installs_listed: an agent without a state folder, or one that could not read its
        journals, changes no plan). An install is the plan's only if its
        code hash is the approved one and its process the plan's (pid and start time); anything else changes
        no plan and is audited as `plan_install_unknown` (ids no plan has: one row per host summing them up,
        written again only when the set changes). Plans no flow here runs:
          installing, listed installed           -> installed
          installing, not listed, no command out -> install_failed (a flow that died before or after an
                                                   answer the agent gave; one still out is resent instead)
          installed,  not listed or heap_kept    -> reverted (start-up recovery or the process's exit)
          reverting,  not listed or heap_kept    -> reverted ("settled from the agent's report": the revert
                                                   finished while the stream was down, or the agent died in
                                                   it and its start-up recovery finished it)
          reverting,  listed installed, no revert command out
                                                 -> installed, with the error that the revert did not
                                                   complete (one still out is resent instead)
        each audited as `plan_reconciled`; a command whose plan is settled so is failed ("its answer was
        lost"), so it is not sent again. Returns how many plans changed."""
        listed = {i.plan_id: i for i in installs}
        changed = 0
        async with self.sessionmaker() as db:
            rows = (await db.execute(text("""
                SELECT p.*, c.state AS cmd_state, rc.state AS revert_cmd_state FROM plans p
                LEFT JOIN commands c ON c.id = p.install_command
                LEFT JOIN commands rc ON rc.id = p.revert_command
                WHERE p.host_id = :h
                  AND (p.state IN ('installing', 'installed', 'reverting') OR CAST(p.id AS text) = ANY(:ids))
                FOR UPDATE OF p"""), {"h": host_id, "ids": list(listed)})).all()
            known = {str(r.id) for r in rows}
            await _audit_unknown_installs(db, host_id, sorted(set(listed) - known))
            for r in rows:
                if str(r.id) in self.tasks:
                    continue
                i = listed.get(str(r.id))
                if i is not None and (i.code_sha256 != r.approved_code_sha256 or i.pid != r.target_pid
                                      or i.start_time != r.target_start_time):
                    _audit(db, f"agent:{host_id}", "plan_install_unknown", r, state=i.state, pid=i.pid,
                           listed_code_sha256=i.code_sha256,
                           reason="the install is not the approved plan in the plan's process")
                    log.warning("host %s lists install %s that is not the approved plan in its process",
                                host_id, r.id)
                    continue
                entry = None if i is None else {
                    "id": i.plan_id, "state": i.state, "pid": i.pid, "start_time": i.start_time, "root": i.root,
                    "code_sha256": i.code_sha256, "heap": f"0x{i.heap:x}", "heap_len": i.heap_len}
                new, why = None, None
                if r.state == "installing" and i is not None and i.state == "installed":
                    new = (await db.execute(text("""
                        UPDATE plans SET state = 'installed', installed_at = coalesce(installed_at, now()),
                          install_detail = CAST(:d AS jsonb), error = NULL, updated_at = now()
                        WHERE id = :id RETURNING *"""), {"id": r.id, "d": orjson.dumps(entry).decode()})).one()
                    why = "the agent's Hello lists the plan as installed"
                elif (r.state == "installing" and i is None
                      and (r.install_command is None or r.cmd_state in ("done", "failed", "cancelled"))):
                    why = "no install flow runs and the agent's Hello does not list the plan as installed"
                    new = (await db.execute(text("""
                        UPDATE plans SET state = 'install_failed', error = :e, updated_at = now()
                        WHERE id = :id RETURNING *"""), {"id": r.id, "e": why})).one()
                elif r.state == "installed" and (i is None or i.state in ("heap_kept", "process_gone")):
                    why = ("the agent's Hello does not list the plan: its journal is gone (reverted at the "
                           "agent's start-up, or its process exited)" if i is None else
                           f"the agent's Hello lists the plan as {i.state}")
                    new = (await db.execute(text("""
                        UPDATE plans SET state = 'reverted', reverted_at = now(),
                          revert_detail = CAST(:d AS jsonb), updated_at = now()
                        WHERE id = :id RETURNING *"""),
                        {"id": r.id, "d": orjson.dumps({"status": "reconciled", "reason": why,
                                                         "listed": entry}).decode()})).one()
                elif r.state == "reverting" and (
                        i is None or i.state in ("heap_kept", "process_gone")
                        or (i.state == "installed" and r.revert_cmd_state not in ACTIVE_COMMAND)):
                    new, why = await _settle_reverting(db, r, entry, "the agent's Hello")
                if new is None:
                    continue
                lost = {"installing": r.install_command, "reverting": r.revert_command}.get(r.state)
                if lost is not None:
                    # Its answer, if the agent kept one, is not wanted any more: the command is not sent
                    # again, and a replay of it that still comes is an answer to an ended command.
                    await db.execute(text("""
                        UPDATE commands SET state = 'failed', finished_at = now(), error = :e
                        WHERE id = :c AND state IN ('queued', 'sent', 'running')"""),
                        {"c": lost, "e": f"its answer was lost: {why}"})
                _audit(db, "system", "plan_reconciled", new, result=new.state, reason=why, was=r.state,
                       source="hello")
                log.info("plan %s reconciled from Hello: %s (%s)", r.id, new.state, why)
                changed += 1
            await db.commit()
        return changed

    async def reconcile_loop(self) -> None:
        interval = self.settings.plan_reconcile_interval_s
        await asyncio.sleep(min(5.0, interval))  # let agents reconnect first
        while True:
            try:
                await self.reconcile()
            except Exception:  # noqa: BLE001 - the database or an agent may be restarting; next round
                log.warning("plan reconciliation failed; next round in %g s", interval)
            await asyncio.sleep(interval)

    async def stop(self) -> None:
        for t in list(self.tasks.values()):
            t.cancel()
        for t in list(self.tasks.values()):
            try:
                await t
            except asyncio.CancelledError:
                log.info("an install flow was stopped with the backend; its plan stays installing")


# Reading --------------------------------------------------------------------------------------

async def list_plans(db: AsyncSession, host_id: str, limit: int, target: str | None,
                     digest: str | None, function_index: int | None,
                     states: Sequence[str] | None = None) -> list[dict[str, Any]]:
    await refresh_stale(db, host_id)
    await db.commit()
    where, params = ["host_id = :h"], {"h": host_id, "l": limit}
    if states:
        where.append("state = ANY(:s)")
        params["s"] = list(states)
    if target:
        where.append("target_id = :t")
        params["t"] = target
    if digest:
        where.append("root_digest = :d")
        params["d"] = digest
    if function_index is not None:
        where.append("root_function_index = :i")
        params["i"] = function_index
    rows = await db.execute(text(f"SELECT * FROM plans WHERE {' AND '.join(where)} ORDER BY created_at DESC LIMIT :l"),
                            params)
    return [public(r) for r in rows]


async def get_plan(db: AsyncSession, host_id: str, plan_id: uuid.UUID) -> dict[str, Any] | None:
    await refresh_stale(db, host_id, plan_id)
    await db.commit()
    row = await _row(db, host_id, plan_id)
    if row is None:
        return None
    out = public(row, detail=True)
    out["comparison"] = await comparison(db, host_id, row)
    return out


async def audit_trail(db: AsyncSession, plan_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = await db.execute(text("""
        SELECT id, at, actor, action, target, detail FROM audit_log WHERE target = :t ORDER BY id"""),
        {"t": str(plan_id)})
    return [{"id": r.id, "at": r.at, "actor": r.actor, "action": r.action, "target": r.target, "detail": r.detail}
            for r in rows]


async def _window_figures(db: AsyncSession, host_id: str, mid: str | None) -> dict[str, Any] | None:
    """One window's figures for the root (resource 0) over the whole window, and their spread: the
    lowest and highest value of each figure over the window's one-second intervals."""
    if not mid:
        return None
    m = await measurements.get(db, host_id, mid)
    if m is None:
        return None
    out: dict[str, Any] = {"measurement_id": mid, "state": m["state"], "detail": m["detail"], "seconds": 0.0,
                           "calls": None, "unavailable": {}, "spread": {}, **{f: None for f in FIGURES}}
    if m["resources"]:
        for metric in m["resources"][0]["metrics"]:
            if not metric.get("available"):
                out["unavailable"][metric["metric"]] = metric.get("reason") or "not served on this host"
    start = m["started_at"] or m["created_at"]
    end = m["ended_at"] or m["last_ts"] or datetime.now(UTC)
    r = samples.TimeRange(start - timedelta(seconds=2), end + timedelta(seconds=2))
    vals = await samples.measurement_values(db, mid, r)
    out["seconds"] = vals["measured_seconds"]
    row0 = next((x for x in vals["resources"] if x["resource"] == 0), None)
    if row0 is None or not vals["measured_seconds"]:
        return out
    out.update(_figures(row0["values"], vals["measured_seconds"], out["unavailable"]))
    out["calls"] = row0["values"].get("count")
    series = await samples.measurement_series(db, mid, r, [0], points=3600)
    seconds = {b["t"]: b["seconds"] for b in series["buckets"]}
    per: dict[str, list[float]] = {}
    for point in series["series"][0]["points"]:
        for key, v in _figures(point["values"], seconds.get(point["t"], 0.0), out["unavailable"]).items():
            if v is not None:
                per.setdefault(key, []).append(v)
    out["spread"] = {k: {"min": min(v), "max": max(v), "intervals": len(v)} for k, v in per.items()}
    return out


def _figures(v: dict[str, float | None], seconds: float, unavailable: dict[str, str]) -> dict[str, float | None]:
    """Calls per second and the per-call figures of summed values over `seconds` measured seconds."""
    calls = v.get("count")
    out: dict[str, float | None] = {f: None for f in FIGURES}
    if calls is not None and seconds:
        out["calls_per_s"] = calls / seconds
    if calls:
        for key, slot, metric in PER_CALL:
            value = v.get(slot)
            if value is not None and metric not in unavailable:
                out[key] = value / calls
    return out


async def comparison(db: AsyncSession, host_id: str, row) -> dict[str, Any] | None:
    """The root before and after the install (KernInst Figure 4): calls per second, wall and vtime per
    call and the hardware counters per call in each window, each with its spread, and each figure's
    change."""
    before = await _window_figures(db, host_id, row.before_measurement)
    after = await _window_figures(db, host_id, row.after_measurement)
    if before is None and after is None:
        return None
    change = {}
    for key in FIGURES:
        b, a = (before or {}).get(key), (after or {}).get(key)
        change[key] = (a - b) / b if a is not None and b else None
    return {"before": before, "after": after, "change": change}
