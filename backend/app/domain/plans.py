# SPDX-License-Identifier: Apache-2.0
"""Code positioning plans and their approval workflow (KernInst's code positioning and replacement,
with an approval in front of every install).

A plan is made by the host's agent (the MakePlan command) for a root function of a target, or for a
process's whole hot set (no root asked: the plan's first function laid out becomes its root when the
answer is stored, and the install's windows measure that function); the answer is checked
(app.domain.plan_check) before anything is stored. Its states:

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
    installed  → reverting also by the guard (actor "system"): an install with the guard on (the default
               for a process plan) is compared with the original code in interleaved windows right after
               it (app.domain.plan_compare), and a "slower" verdict reverts it with the figures as reason;
               an installed process plan may be compared again at any time (it stays installed)
    reverting  → reverted | installed also by reconciliation (Hello, and ListInstalled once the revert's
               answer is overdue), when the revert's answer was lost: settled from the agent's report
    ready, requested, approved, install_failed, installed → stale when the target exits or its pid,
               start time or build id no longer match the plan's.

Every transition is audited with who and when (action `plan_*`, target = the plan's id). Transitions
are single UPDATEs guarded by the state they leave, so two users racing see one succeed and the other
a 409.
"""

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.core.config import Settings
from app.core.live import LiveHub
from app.core.tasks import cancel_all
from app.domain import plan_compare
from app.domain.commands import Answer, CommandError, Commands
from app.domain.plan_payload import install_payload
from app.domain.plan_reconcile import Reconciliation
from app.domain.plan_records import RECORD, audit, find, public, publish_state, refresh_stale, stale_reason
from app.domain.plan_results import after_end, on_install_result, on_list_result, on_plan_result, on_revert_result
from app.domain.plan_views import detail
from app.storage import measurements

log = logging.getLogger("hotpath.plans")
# A hot-set plan's root until its answer names the first function laid out (the agent's own name for it).
HOT_SET_ROOT = "(hot set)"
# The root's figures in the windows before and after an install (KernInst's Figure 4): calls, wall and
# virtualized time, and the hardware counters where the host has a PMU (asked with allow_partial, so a
# host without one reports them unavailable with its reason instead of refusing the window).
ROOT_METRICS = ["count", "wall", "vtime", "cycles", "instructions", "icache_stall", "branch_mispredict"]


class PlanError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


# Staleness -------------------------------------------------------------------------------------


# What agents answer (called by app.domain.commands inside the result's transaction) ---------------------


# The workflow ---------------------------------------------------------------------------------


class Plans(Reconciliation):
    def __init__(
        self, settings: Settings, sessionmaker: async_sessionmaker[AsyncSession], hub: LiveHub, commands: Commands
    ) -> None:
        self.settings = settings
        self.sessionmaker = sessionmaker
        self.hub = hub
        self.commands = commands
        self.tasks: dict[str, asyncio.Task[None]] = {}
        plan_kind = {"on_end": after_end, "published": self._published}

        async def made(db: AsyncSession, session: Any, row: Any, result: Any) -> Answer:
            return await on_plan_result(db, settings, row, result)

        async def installed(db: AsyncSession, session: Any, row: Any, result: Any) -> Answer:
            return await on_install_result(db, row, result)

        async def reverted(db: AsyncSession, session: Any, row: Any, result: Any) -> Answer:
            return await on_revert_result(db, row, result)

        async def listed(db: AsyncSession, session: Any, row: Any, result: Any) -> Answer:
            return on_list_result(result)

        async def compared(db: AsyncSession, session: Any, row: Any, result: Any) -> Answer:
            answer, revert_reason = await plan_compare.on_result(db, row, result)
            if revert_reason is not None:
                await self._guard_revert(db, row.host_id, uuid.UUID(row.params["plan_id"]), revert_reason)
            return answer

        commands.handle("make_plan", made, **plan_kind)
        commands.handle("install_plan", installed, payload=self._plan_json, **plan_kind)
        commands.handle("revert_plan", reverted, **plan_kind)
        commands.handle("list_installed", listed)
        commands.handle(
            "compare_plan", compared, on_end=plan_compare.on_end, published=self._published, ends_when_away=True
        )

    async def _plan_json(self, cmd: Any) -> str:
        """What an install carries: the plan as the backend checked and stored it, cut to what the
        agent's installer reads (plan_payload); the agent recomputes its code's hash and refuses it
        unless it is the approved one."""
        async with self.sessionmaker() as db:
            stored = (
                await db.execute(
                    text("SELECT plan_json FROM plans WHERE id = :id"), {"id": uuid.UUID(cmd.params["plan_id"])}
                )
            ).scalar()
        return orjson.dumps(install_payload(stored)).decode() if isinstance(stored, dict) else ""

    async def _published(self, host_id: str, cmd: Any) -> None:
        """A plan command's answer moved its plan (ready, installed, reverted, failed): say so live."""
        if not (isinstance(cmd.params, dict) and cmd.params.get("plan_id")):
            return
        plan_id = cmd.params["plan_id"]
        async with self.sessionmaker() as db:
            state = (
                await db.execute(
                    text("SELECT state FROM plans WHERE id = CAST(:id AS uuid) AND host_id = :h"),
                    {"id": plan_id, "h": host_id},
                )
            ).scalar()
        if state is not None:
            publish_state(self.hub, host_id, plan_id, state)

    async def create(self, db: AsyncSession, host_id: str, body: Any, actor: str) -> tuple[dict[str, Any], bool]:
        state = (
            await db.execute(
                text("SELECT state FROM host_targets WHERE host_id = :h AND id = :t"), {"h": host_id, "t": body.target}
            )
        ).scalar()
        if state is None:
            raise PlanError(404, "Target not found")
        if state != "attached":
            raise PlanError(409, f"The target has ended ({state})")
        if body.hot_set:
            return await self._create(db, host_id, body, actor, await self._hot_set_module(db, host_id, body))
        if body.function_id is not None:
            named = (
                await db.execute(text("SELECT digest, index FROM functions WHERE id = :i"), {"i": body.function_id})
            ).first()
            if named is None:
                raise PlanError(404, "Function not found")
            body.digest, body.function_index = named.digest, named.index
        fn = (
            await db.execute(
                text("""
            SELECT f.name FROM functions f JOIN host_modules hm ON hm.digest = f.digest
            WHERE hm.host_id = :h AND hm.target_id = :t AND f.digest = :d AND f.index = :i LIMIT 1"""),
                {"h": host_id, "t": body.target, "d": body.digest, "i": body.function_index},
            )
        ).scalar()
        if fn is None:
            raise PlanError(404, "The target has no such function (module digest and function index)")
        return await self._create(db, host_id, body, actor, fn)

    async def _hot_set_module(self, db: AsyncSession, host_id: str, body: Any) -> str:
        """A hot-set request's module must be one of the target's (when named); the root's name until
        the plan names its first function."""
        if body.digest is not None:
            named = (
                await db.execute(
                    text("SELECT 1 FROM host_modules WHERE host_id = :h AND target_id = :t AND digest = :d LIMIT 1"),
                    {"h": host_id, "t": body.target, "d": body.digest},
                )
            ).scalar()
            if named is None:
                raise PlanError(404, "The target has no module with that catalog digest")
        return HOT_SET_ROOT

    async def _create(
        self, db: AsyncSession, host_id: str, body: Any, actor: str, fn: str
    ) -> tuple[dict[str, Any], bool]:
        plan_id = body.plan_id or uuid.uuid4()
        have = await find(db, host_id, plan_id)
        if have is not None:
            return public(have), False
        options = {
            "seconds": body.seconds,
            "join_fraction": body.join_fraction,
            "stall_threshold": body.stall_threshold,
            "max_functions": body.max_functions,
            "measurement_id": body.measurement_id,
        }
        if body.hot_set:
            options["hot_set"] = True
        params = {
            "plan_id": str(plan_id),
            "target": body.target,
            "digest": body.digest,
            "function_index": body.function_index,
            **options,
        }
        try:
            cmd, _ = await self.commands.create(db, host_id, "make_plan", params, actor)
        except CommandError as exc:
            raise PlanError(exc.status, exc.detail) from None
        row = (
            await db.execute(
                text(f"""
            INSERT INTO plans (id, host_id, target_id, root_digest, root_function_index, root_name, options, state,
                               make_command, created_by)
            VALUES (:id, :h, :t, :d, :i, :n, CAST(:o AS jsonb), 'planning', :c, :by) RETURNING {RECORD}"""),
                {
                    "id": plan_id,
                    "h": host_id,
                    "t": body.target,
                    "d": body.digest or "",
                    "i": -1 if body.hot_set else body.function_index,
                    "n": fn,
                    "o": orjson.dumps(options).decode(),
                    "c": uuid.UUID(cmd["id"]),
                    "by": actor,
                },
            )
        ).one()
        audit(db, actor, "plan_create", row, target=body.target)
        return public(row), True

    async def _transition(
        self,
        db: AsyncSession,
        host_id: str,
        plan_id: uuid.UUID,
        frm: tuple[str, ...],
        sql_set: str,
        params: dict[str, Any],
        actor: str,
        action: str,
        check: Callable[[Row[Any]], None] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        await refresh_stale(db, host_id, plan_id)
        row = await find(db, host_id, plan_id, lock=True)
        if row is None:
            raise PlanError(404, "Plan not found")
        if row.state not in frm:
            why = f" ({row.stale_reason})" if row.state == "stale" else ""
            raise PlanError(409, f"The plan is {row.state}{why}; this needs it {' or '.join(frm)}")
        if check is not None:
            check(row)
        changed = (
            await db.execute(
                text(
                    f"UPDATE plans SET {sql_set}, updated_at = now() WHERE id = :id AND state = :was RETURNING {RECORD}"
                ),
                {"id": plan_id, "was": row.state, **params},
            )
        ).one()
        audit(db, actor, action, changed, was=row.state, **extra)
        return await detail(db, host_id, changed)

    async def request(self, db: AsyncSession, host_id: str, plan_id: uuid.UUID, actor: str) -> dict[str, Any]:
        return await self._transition(
            db,
            host_id,
            plan_id,
            ("ready",),
            "state = 'requested', requested_by = :by, requested_at = now()",
            {"by": actor},
            actor,
            "plan_request",
        )

    async def approve(self, db: AsyncSession, host_id: str, plan_id: uuid.UUID, actor: str) -> dict[str, Any]:
        def check(row: Row[Any]) -> None:
            # Two people: the approver is neither the requester nor the plan's maker (a maker who got a
            # colleague to request must still find a third person to approve).
            if row.requested_by == actor:
                raise PlanError(403, "The requester cannot approve their own request: another approver must")
            if row.created_by == actor:
                raise PlanError(
                    403, "The plan's maker cannot approve it: an approver who neither made nor requested it must"
                )
            if not row.code_sha256:
                raise PlanError(409, "The plan has no code to approve")

        return await self._transition(
            db,
            host_id,
            plan_id,
            ("requested",),
            "state = 'approved', approved_by = :by, approved_at = now(), "
            "approved_code_sha256 = code_sha256, approved_build_id = build_id",
            {"by": actor},
            actor,
            "plan_approve",
            check,
        )

    async def reject(
        self, db: AsyncSession, host_id: str, plan_id: uuid.UUID, actor: str, reason: str
    ) -> dict[str, Any]:
        def check(row: Row[Any]) -> None:
            if row.requested_by == actor:
                raise PlanError(403, "The requester cannot decide their own request: another approver must")

        return await self._transition(
            db,
            host_id,
            plan_id,
            ("requested",),
            "state = 'rejected', rejected_by = :by, rejected_at = now(), reject_reason = :r",
            {"by": actor, "r": reason},
            actor,
            "plan_reject",
            check,
            reason=reason,
        )

    async def install(
        self,
        db: AsyncSession,
        host_id: str,
        plan_id: uuid.UUID,
        actor: str,
        window_s: int,
        guard: tuple[int, float] | None = None,
    ) -> dict[str, Any]:
        """Install an approved plan (a flow: window before, InstallPlan, the guard's comparison when
        `guard` gives its (pairs, window seconds) and the plan is a process's, window after)."""

        def check(row: Row[Any]) -> None:
            if (
                not row.approved_by
                or row.approved_code_sha256 != row.code_sha256
                or row.approved_build_id != row.build_id
            ):
                raise PlanError(409, "The plan's code or build id is not the one approved")

        out = await self._transition(
            db,
            host_id,
            plan_id,
            ("approved",),
            "state = 'installing', install_by = :by, window_s = :w, error = NULL",
            {"by": actor, "w": window_s},
            actor,
            "plan_install_requested",
            check,
            window_s=window_s,
            guard=guard is not None,
        )
        await db.commit()
        self._spawn(host_id, plan_id, actor, guard)
        return out

    async def revert(
        self, db: AsyncSession, host_id: str, plan_id: uuid.UUID, actor: str, **why: Any
    ) -> dict[str, Any]:
        await refresh_stale(db, host_id, plan_id)
        row = await find(db, host_id, plan_id, lock=True)
        if row is None:
            raise PlanError(404, "Plan not found")
        if row.state != "installed":
            raise PlanError(409, f"The plan is {row.state}; only an installed plan is reverted")
        try:
            cmd, _ = await self.commands.create(
                db, host_id, "revert_plan", {"plan_id": str(plan_id), "target": row.target_id}, actor
            )
        except CommandError as exc:
            raise PlanError(exc.status, exc.detail) from None
        changed = (
            await db.execute(
                text(f"""
            UPDATE plans SET state = 'reverting', revert_by = :by, revert_command = :c, updated_at = now()
            WHERE id = :id AND state = 'installed' RETURNING {RECORD}"""),
                {"id": plan_id, "by": actor, "c": uuid.UUID(cmd["id"])},
            )
        ).one()
        audit(db, actor, "plan_revert_requested", changed, **why)
        return await detail(db, host_id, changed)

    async def _guard_revert(self, db: AsyncSession, host_id: str, plan_id: uuid.UUID, reason: str) -> None:
        """The guard's revert of a plan its comparison found slower: by the system, with the figures."""
        try:
            await self.revert(db, host_id, plan_id, "system", reason=reason)
        except PlanError as exc:
            log.warning("plan %s: the guard could not revert it: %s", plan_id, exc.detail)
            row = await find(db, host_id, plan_id)
            if row is not None:
                audit(db, "system", "plan_guard_revert_failed", row, reason=exc.detail)

    async def compare(
        self, db: AsyncSession, host_id: str, plan_id: uuid.UUID, actor: str, pairs: int, window_seconds: float
    ) -> dict[str, Any]:
        """Compare an installed process plan with the original code again (interleaved windows); it
        stays installed whatever the verdict."""
        await refresh_stale(db, host_id, plan_id)
        row = await find(db, host_id, plan_id, lock=True)
        if row is None:
            raise PlanError(404, "Plan not found")
        why = plan_compare.not_comparable(row)
        if why is not None:
            raise PlanError(409, why)
        if await plan_compare.running(db, plan_id):
            raise PlanError(409, "A comparison of this plan is running")
        await plan_compare.start(db, self.commands, row, actor, pairs, window_seconds, guard=False)
        return await detail(db, host_id, row)

    # Install: a window before, the install, a window after --------------------------------------

    def _spawn(self, host_id: str, plan_id: uuid.UUID, actor: str, guard: tuple[int, float] | None) -> None:
        task = asyncio.create_task(self._install_flow(host_id, plan_id, actor, guard), name=f"install-{plan_id}")
        self.tasks[str(plan_id)] = task
        task.add_done_callback(lambda _t: self.tasks.pop(str(plan_id), None))

    async def _window(self, host_id: str, row: Row[Any], which: str, actor: str) -> str | None:
        """Measure the root for the plan's window (count, wall and vtime); the measurement's id, or None
        when it could not start (its failure is on the measurement)."""
        mid = str(uuid.uuid4())
        request = {
            "measurement_id": mid,
            "target": row.target_id,
            "metrics": ROOT_METRICS,
            "resources": [
                {
                    "digest": row.root_digest,
                    "function_index": row.root_function_index,
                    "kind": "function",
                    "offset": 0,
                    "blocks": False,
                }
            ],
            "where_pid": None,
            "where_comm": None,
            "where_cgroup": None,
            "interval_ms": 1000,
            "allow_partial": True,
        }
        cmds = self.commands
        async with self.sessionmaker() as db:
            cmd, _ = await cmds.create(db, host_id, "start_measurement", request, actor)
            await measurements.create(db, mid, host_id, request, 1000, actor, uuid.UUID(cmd["id"]))
            await db.execute(
                text(f"UPDATE plans SET {which}_measurement = :m, updated_at = now() WHERE id = :id"),
                {"m": mid, "id": row.id},
            )
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

    async def _guard(self, host_id: str, plan_id: uuid.UUID, actor: str, pairs: int, window_seconds: float) -> None:
        """The guard's comparison right after an install; its answer's handler reverts a slower plan."""
        async with self.sessionmaker() as db:
            row = await find(db, host_id, plan_id, lock=True)
            if row is None or plan_compare.not_comparable(row) is not None:
                await db.rollback()
                return
            cid = await plan_compare.start(db, self.commands, row, actor, pairs, window_seconds, guard=True)
            await db.commit()
        publish_state(self.hub, host_id, str(plan_id), "installed")
        await self.commands.wait(str(cid), self.settings.plan_install_timeout_s + 2 * pairs * window_seconds)

    async def _install_flow(
        self, host_id: str, plan_id: uuid.UUID, actor: str, guard: tuple[int, float] | None = None
    ) -> None:
        try:
            async with self.sessionmaker() as db:
                row = await find(db, host_id, plan_id)
            assert row is not None  # (install() found it; if it is gone, the flow fails as before)
            await self._window(host_id, row, "before", actor)
            async with self.sessionmaker() as db:
                row = await find(db, host_id, plan_id, lock=True)
                if row is None or row.state != "installing":
                    await db.rollback()
                    return
                why = await stale_reason(db, row)
                if why is not None:
                    await db.execute(
                        text("""UPDATE plans SET state = 'stale', stale_reason = :w, updated_at = now()
                                             WHERE id = :id"""),
                        {"id": plan_id, "w": why},
                    )
                    audit(db, "system", "plan_stale", row, reason=why, was="installing")
                    await db.commit()
                    return
                cmd, _ = await self.commands.create(
                    db,
                    host_id,
                    "install_plan",
                    {
                        "plan_id": str(plan_id),
                        "target": row.target_id,
                        "approved_code_sha256": row.approved_code_sha256,
                        "entry_only": False,
                    },
                    actor,
                )
                await db.execute(
                    text("UPDATE plans SET install_command = :c WHERE id = :id"),
                    {"c": uuid.UUID(cmd["id"]), "id": plan_id},
                )
                await db.commit()
            done = await self.commands.wait(cmd["id"], self.settings.plan_install_timeout_s)
            if done is None or done["state"] != "done":
                return
            if guard is not None:
                await self._guard(host_id, plan_id, actor, *guard)
            async with self.sessionmaker() as db:
                row = await find(db, host_id, plan_id)
            if row is not None and row.state == "installed":
                await self._window(host_id, row, "after", actor)
        except Exception:  # noqa: BLE001 - the plan says what happened; the flow must not die silently
            log.exception("plan %s: the install flow failed", plan_id)
            async with self.sessionmaker() as db:
                row = (
                    await db.execute(
                        text(f"""
                    UPDATE plans SET state = 'install_failed', error = 'the backend could not run the install',
                      updated_at = now() WHERE id = :id AND state = 'installing' AND install_command IS NULL
                    RETURNING {RECORD}"""),
                        {"id": plan_id},
                    )
                ).first()
                if row is not None:
                    audit(db, "system", "plan_install_failed", row, reason="backend error")
                await db.commit()

    # Reconciliation: plans an install flow left installing ---------------------------------------

    # Reconciliation from Hello: what the agent's journals hold on every connect ----------------------

    async def stop(self) -> None:
        if n := await cancel_all(list(self.tasks.values())):
            log.info("%d install flow(s) stopped with the backend; their plans stay installing", n)


# Reading --------------------------------------------------------------------------------------
