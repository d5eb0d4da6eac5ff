# SPDX-License-Identifier: Apache-2.0
"""Staged roll-out of an approved plan over the hosts of its build, with the guard on every host
(issue 19, "Staged roll-out with guarded apply").

Eligible hosts are the active hosts of the plan's build: for a kernel plan, hosts whose kernel build id is
the plan's; for a process plan, hosts with an attached process whose module (the plan's `target_module`)
has the plan's build id; narrowed by labels (every label of the filter) and, when named, by host ids. A
named host of another build is refused up front with the reason; the build is checked again right
before each host's install, and a host whose build changed is skipped untouched.

Waves: the hosts in order (the plan's own host first when it is eligible, then by id) cut into waves of
`wave_sizes` (the last size repeats; the default doubles: 1, 2, 4, 8...; the first wave is the canary of
one host). A wave starts when every host of the one before has answered. Each host gets a per-host plan
derived from the approved one (app.domain.plans' row with the same code, code hash and build id, the
target rewritten to the host's process, `derived_from` naming the approved plan whose approval it
inherits, `rollout_id` the roll-out; audited as `plan_derived`), installed by the existing install flow
with the guard (a process plan: interleaved windows right after the install, a slower plan reverted by
the system). A host is done when its guard has answered: `installed` (kept), `reverted` (the guard
reverted it: the roll-out halts with the figures as reason), `failed` (the install failed, the plan went
stale, or the guard could not compare: the roll-out halts), `skipped` (offline longer than
`offline_wait_s`, its build changed, or another plan holds its target: the roll-out goes on).

States: running → paused | halted | completed | reverting; paused → running | reverting; halted,
completed → reverting → reverted (every installed per-host plan reverted; hosts not started are
skipped). Everything lives in rollouts and rollout_hosts, so a backend that restarts resumes each roll-out
from its rows (start()): a host whose install flow died with the backend is settled by the plans'
reconciliation, and an installed process plan whose guard never started is compared now.
Every transition is audited (action `rollout_*`, target = the roll-out's id).
"""

import asyncio
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.core.live import LiveHub
from app.core.tasks import cancel_all
from app.domain import plan_compare
from app.domain.plan_records import audit as plan_audit
from app.domain.plan_records import find, refresh_stale
from app.domain.plans import PlanError, Plans
from app.storage import audit_log

log = logging.getLogger("hotpath.rollouts")

ACTIVE = ("running", "paused", "reverting")
IN_FLIGHT = ("installing", "comparing")
HOST_FINAL = ("installed", "reverted", "skipped", "failed")
PLAN_HOLDS_TARGET = ("installing", "installed", "reverting")
MAX_WAVES = 64
DEFAULT_OFFLINE_WAIT_S = 60.0


class RolloutError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def wave_sizes(asked: list[int] | None, hosts: int) -> list[int]:
    """The sizes of the waves that cover `hosts` hosts: the sizes asked (the last repeats), or doubling
    from the canary of one."""
    sizes = list(asked) if asked else []
    out: list[int] = []
    left = hosts
    while left > 0:
        n = (sizes[len(out)] if len(out) < len(sizes) else sizes[-1]) if sizes else 1 << len(out)
        out.append(min(n, left))
        left -= out[-1]
    return out


def _audit(db: AsyncSession, actor: str, action: str, rollout_id: uuid.UUID, **detail: Any) -> None:
    audit_log.record(db, actor, action, str(rollout_id), {"rollout_id": str(rollout_id), **detail})


def _target_pid(target_id: str) -> tuple[int, int] | None:
    if not target_id.startswith("p"):
        return None
    pid, start = target_id[1:].split("-")
    return int(pid), int(start)


class Rollouts:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession], hub: LiveHub, plans: Plans) -> None:
        self.sessionmaker = sessionmaker
        self.hub = hub
        self.plans = plans
        self.poll_s = 0.5
        self.tasks: dict[str, asyncio.Task[None]] = {}

    # Who is eligible ----------------------------------------------------------------------------

    async def _module_of(self, db: AsyncSession, plan: Row[Any]) -> str | None:
        """The name of the module the plan's root is in, on the plan's own host."""
        return (
            await db.execute(
                text("SELECT name FROM host_modules WHERE host_id = :h AND target_id = :t AND digest = :d LIMIT 1"),
                {"h": plan.host_id, "t": plan.target_id, "d": plan.root_digest},
            )
        ).scalar()

    async def _candidates(
        self, db: AsyncSession, kind: str, build_id: str, module: str | None, labels: dict[str, str], host: str | None
    ) -> list[Row[Any]]:
        """(host id, target id) of active hosts of the build with the labels; one process per host (the
        earliest attached)."""
        lab = orjson.dumps(labels).decode()
        only = " AND h.id = :host" if host is not None else ""
        if kind == "kernel":
            sql = f"""SELECT h.id AS host_id, 'kernel' AS target_id FROM hosts h
                      WHERE h.status = 'active' AND h.kernel_build_id = :b AND h.labels @> CAST(:l AS jsonb){only}
                      ORDER BY h.id"""
        else:
            sql = f"""SELECT DISTINCT ON (h.id) h.id AS host_id, t.id AS target_id FROM hosts h
                      JOIN host_targets t ON t.host_id = h.id AND t.kind = 'process' AND t.state = 'attached'
                      JOIN host_modules m ON m.host_id = h.id AND m.target_id = t.id AND m.name = :m
                                         AND m.build_id = :b
                      WHERE h.status = 'active' AND h.labels @> CAST(:l AS jsonb){only}
                      ORDER BY h.id, t.attached_at, t.id"""
        return list((await db.execute(text(sql), {"b": build_id, "m": module, "l": lab, "host": host})).all())

    async def _why_not(self, db: AsyncSession, kind: str, build_id: str, module: str | None, host: str) -> str:
        h = (await db.execute(text("SELECT status, kernel_build_id FROM hosts WHERE id = :h"), {"h": host})).first()
        if h is None:
            return f"{host}: no such host"
        if h.status != "active":
            return f"{host}: the host is {h.status}"
        if kind == "kernel":
            if h.kernel_build_id != build_id:
                return f"{host}: its kernel build is {h.kernel_build_id or 'unknown'}, not the plan's {build_id}"
            return f"{host}: its labels do not match the filter"
        builds = (
            await db.execute(
                text("""SELECT DISTINCT m.build_id FROM host_modules m JOIN host_targets t
                        ON t.host_id = m.host_id AND t.id = m.target_id AND t.state = 'attached'
                        WHERE m.host_id = :h AND m.name = :m"""),
                {"h": host, "m": module},
            )
        ).scalars()
        found = sorted(b for b in builds if b)
        if not found:
            return f"{host}: no running process has {module}"
        if build_id not in found:
            return f"{host}: its {module} is build {', '.join(found)}, not the plan's {build_id}"
        return f"{host}: its labels do not match the filter"

    async def _still_of_build(self, db: AsyncSession, ro: Row[Any], module: str | None, host: str, target: str) -> bool:
        """Whether the host (kernel) or its target (process) still runs the roll-out's build."""
        if ro.kind == "kernel":
            sql = "SELECT 1 FROM hosts WHERE id = :h AND status = 'active' AND kernel_build_id = :b"
        else:
            sql = """SELECT 1 FROM hosts h
                     JOIN host_targets t ON t.host_id = h.id AND t.id = :t AND t.state = 'attached'
                     JOIN host_modules m ON m.host_id = h.id AND m.target_id = t.id AND m.name = :m AND m.build_id = :b
                     WHERE h.id = :h AND h.status = 'active'"""
        found = await db.execute(text(sql), {"h": host, "t": target, "m": module, "b": ro.build_id})
        return found.scalar() is not None

    async def _conflict(
        self, db: AsyncSession, host: str, target: str, rollout_id: uuid.UUID | None, own_plan: uuid.UUID | None
    ) -> str | None:
        """Why another plan or roll-out holds the host's target (None: nothing does)."""
        other = (
            await db.execute(
                text("""SELECT id, state FROM plans WHERE host_id = :h AND target_id = :t AND state = ANY(:s)
                        AND id IS DISTINCT FROM :own AND rollout_id IS DISTINCT FROM :r LIMIT 1"""),
                {"h": host, "t": target, "s": list(PLAN_HOLDS_TARGET), "own": own_plan, "r": rollout_id},
            )
        ).first()
        if other is not None:
            return f"{host}: plan {other.id} is {other.state} on {target}"
        ro = (
            await db.execute(
                text("""SELECT r.id FROM rollout_hosts rh JOIN rollouts r ON r.id = rh.rollout_id
                        WHERE rh.host_id = :h AND r.state = ANY(:a) AND rh.state <> ALL(:f)
                        AND r.id IS DISTINCT FROM :r LIMIT 1"""),
                {"h": host, "a": list(ACTIVE), "f": ["reverted", "skipped", "failed"], "r": rollout_id},
            )
        ).first()
        if ro is not None:
            return f"{host}: roll-out {ro.id} is under way there"
        return None

    # Starting -----------------------------------------------------------------------------------

    async def create(
        self,
        db: AsyncSession,
        plan_host: str,
        plan_id: uuid.UUID,
        actor: str,
        labels: dict[str, str],
        hosts: list[str] | None,
        sizes: list[int] | None,
        settings: dict[str, Any],
    ) -> uuid.UUID:
        """Check the plan and the hosts, store the roll-out and its waves (the caller commits and then
        calls spawn)."""
        # One roll-out is created at a time: two at once could each miss the other's hosts.
        await db.execute(text("SELECT pg_advisory_xact_lock(hashtext('hotpath.rollouts'))"))
        await refresh_stale(db, plan_host, plan_id)
        plan = await find(db, plan_host, plan_id, lock=True)
        if plan is None:
            raise RolloutError(404, "Plan not found")
        if plan.derived_from is not None:
            raise RolloutError(409, f"The plan was made by roll-out {plan.rollout_id}: roll out {plan.derived_from}")
        if plan.state != "approved":
            why = f" ({plan.stale_reason})" if plan.state == "stale" else ""
            raise RolloutError(409, f"The plan is {plan.state}{why}; only an approved plan is rolled out")
        if (
            not plan.approved_by
            or not plan.code_sha256
            or plan.approved_code_sha256 != plan.code_sha256
            or plan.approved_build_id != plan.build_id
        ):
            raise RolloutError(409, "The plan's code or build id is not the one approved")
        if plan.approved_by in (plan.requested_by, plan.created_by):
            raise RolloutError(409, "The plan was approved by its requester or maker: it needs another approver")
        kind = "kernel" if plan.target_id == "kernel" else "process"
        build = (plan.kernel_build_id if kind == "kernel" else plan.approved_build_id) or ""
        if not build:
            raise RolloutError(409, "The plan names no build id: it cannot be matched to other hosts")
        module = await self._module_of(db, plan) if kind == "process" else None
        if kind == "process" and not module:
            raise RolloutError(409, "The plan's module is not loaded on its own host any more")
        found = await self._candidates(db, kind, build, module, labels, None)
        targets = {r.host_id: r.target_id for r in found}
        if kind == "process" and plan_host in targets:
            targets[plan_host] = plan.target_id  # the plan's own process: its approval is for that one
        if hosts is not None:
            refused = [await self._why_not(db, kind, build, module, h) for h in hosts if h not in targets]
            if refused:
                raise RolloutError(409, "Hosts not of the plan's build were named: " + "; ".join(refused))
            targets = {h: targets[h] for h in hosts}
        if not targets:
            raise RolloutError(409, f"No active host of build {build} matches the filter")
        rid = uuid.uuid4()
        conflicts = [c for h, t in targets.items() if (c := await self._conflict(db, h, t, None, plan.id))]
        if conflicts:
            raise RolloutError(409, "Another plan or roll-out holds these hosts: " + "; ".join(conflicts))
        order = sorted(targets, key=lambda h: (h != plan_host, h))
        sizes_used = wave_sizes(sizes, len(order))
        await db.execute(
            text("""INSERT INTO rollouts (id, plan_id, plan_host_id, kind, build_id, code_sha256, requested_by, labels,
                                          wave_sizes, settings, state)
                    VALUES (:id, :p, :ph, :k, :b, :c, :by, CAST(:l AS jsonb), CAST(:w AS jsonb), CAST(:s AS jsonb),
                            'running')"""),
            {
                "id": rid,
                "p": plan.id,
                "ph": plan_host,
                "k": kind,
                "b": build,
                "c": plan.approved_code_sha256,
                "by": actor,
                "l": orjson.dumps(labels).decode(),
                "w": orjson.dumps(sizes_used).decode(),
                "s": orjson.dumps(settings).decode(),
            },
        )
        pos = 0
        for wave, n in enumerate(sizes_used):
            for h in order[pos : pos + n]:
                await db.execute(
                    text("""INSERT INTO rollout_hosts (rollout_id, host_id, position, wave, target_id, state)
                            VALUES (:r, :h, :p, :w, :t, 'pending')"""),
                    {"r": rid, "h": h, "p": pos, "w": wave, "t": targets[h]},
                )
                pos += 1
        _audit(
            db,
            actor,
            "rollout_start",
            rid,
            plan_id=str(plan.id),
            plan_host_id=plan_host,
            code_sha256=plan.approved_code_sha256,
            build_id=build,
            approved_by=plan.approved_by,
            labels=labels,
            hosts=order,
            wave_sizes=sizes_used,
            **settings,
        )
        return rid

    # The state machine ----------------------------------------------------------------------------

    def spawn(self, rollout_id: uuid.UUID) -> None:
        key = str(rollout_id)
        if key in self.tasks:
            return
        task = asyncio.create_task(self._run(rollout_id), name=f"rollout-{key}")
        self.tasks[key] = task
        task.add_done_callback(lambda _t: self.tasks.pop(key, None))

    async def start(self) -> None:
        """Resume every roll-out that is not done (a backend restart): their rows say where they are."""
        async with self.sessionmaker() as db:
            ids = (
                await db.execute(
                    text("""SELECT id FROM rollouts r WHERE state = ANY(:a) OR EXISTS (
                              SELECT 1 FROM rollout_hosts h WHERE h.rollout_id = r.id AND h.state = ANY(:f))"""),
                    {"a": list(ACTIVE), "f": list(IN_FLIGHT)},
                )
            ).scalars()
            for rid in ids:
                self.spawn(rid)

    async def stop(self) -> None:
        await cancel_all(list(self.tasks.values()))

    async def _run(self, rollout_id: uuid.UUID) -> None:
        while True:
            try:
                async with self.sessionmaker() as db:
                    done, starts = await self._step(db, rollout_id)
                    await db.commit()
                for host, target in starts:
                    await self._start_host(rollout_id, host, target)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a step that failed is tried again; its rows are unchanged
                log.exception("roll-out %s: a step failed", rollout_id)
                done = False
            if done:
                return
            await asyncio.sleep(self.poll_s)

    async def _halt(self, db: AsyncSession, ro: Row[Any], reason: str) -> None:
        if ro.state not in ("running", "paused"):
            return
        await db.execute(
            text("UPDATE rollouts SET state = 'halted', reason = :r, updated_at = now() WHERE id = :id"),
            {"id": ro.id, "r": reason},
        )
        _audit(db, "system", "rollout_halt", ro.id, reason=reason, was=ro.state)

    async def _set_host(self, db: AsyncSession, ro: Row[Any], h: Row[Any], state: str, reason: str | None) -> None:
        await db.execute(
            text("""UPDATE rollout_hosts SET state = :s, reason = :r, updated_at = now()
                    WHERE rollout_id = :id AND host_id = :h"""),
            {"id": ro.id, "h": h.host_id, "s": state, "r": reason},
        )
        _audit(
            db,
            "system",
            f"rollout_host_{state}",
            ro.id,
            host_id=h.host_id,
            plan_id=str(h.plan_id) if h.plan_id else None,
            wave=h.wave,
            reason=reason,
        )

    async def _offline_too_long(self, db: AsyncSession, ro: Row[Any], h: Row[Any], online: bool) -> str | None:
        """Track how long the host has been away; the reason to skip it once that passes the wait."""
        if online:
            if h.offline_since is not None:
                await db.execute(
                    text("UPDATE rollout_hosts SET offline_since = NULL WHERE rollout_id = :id AND host_id = :h"),
                    {"id": ro.id, "h": h.host_id},
                )
            return None
        now = datetime.now(tz=UTC)
        if h.offline_since is None:
            await db.execute(
                text("UPDATE rollout_hosts SET offline_since = :n WHERE rollout_id = :id AND host_id = :h"),
                {"id": ro.id, "h": h.host_id, "n": now},
            )
            return None
        wait = float(ro.settings.get("offline_wait_s", DEFAULT_OFFLINE_WAIT_S))
        away = (now - h.offline_since).total_seconds()
        if away < wait:
            return None
        return f"the host was offline for {away:.0f} s (the roll-out waits {wait:g} s); skipped"

    async def _settle(self, db: AsyncSession, ro: Row[Any], h: Row[Any], online: bool) -> str | None:
        """Move an in-flight host on from its plan and its guard; the reason to halt the roll-out, if any."""
        plan = await find(db, h.host_id, h.plan_id) if h.plan_id else None
        if plan is None:
            await self._set_host(db, ro, h, "failed", "its plan is gone")
            return f"{h.host_id}: its plan is gone"
        comp = (
            await db.execute(
                text("""SELECT state, guard_action, guard_reason, error FROM plan_comparisons
                        WHERE plan_id = :p AND guard ORDER BY created_at DESC, id LIMIT 1"""),
                {"p": plan.id},
            )
        ).first()
        if comp is not None and comp.guard_action == "reverted":
            await self._set_host(db, ro, h, "reverted", comp.guard_reason)
            return f"{h.host_id}: {comp.guard_reason}"
        if plan.state in ("install_failed", "stale", "failed", "cancelled"):
            why = plan.stale_reason if plan.state == "stale" else plan.error or plan.state
            await self._set_host(db, ro, h, "failed", f"the install {plan.state}: {why}")
            return f"{h.host_id}: the install {plan.state}: {why}"
        if plan.state in ("reverting", "reverted"):
            await self._set_host(db, ro, h, "reverted", f"reverted by {plan.revert_by}")
            return f"{h.host_id}: its plan was reverted by {plan.revert_by} during the roll-out"
        if plan.state == "installing":
            why = await self._offline_too_long(db, ro, h, online)
            if why is not None:
                await self._set_host(db, ro, h, "skipped", why)
            return None
        if plan.state != "installed":
            return None
        if ro.kind == "kernel":
            if str(plan.id) not in self.plans.tasks:  # the flow's window after has ended (or died with a backend)
                await self._set_host(db, ro, h, "installed", "installed (a kernel plan: no interleaved guard)")
            return None
        if comp is None:
            if str(plan.id) in self.plans.tasks:
                return None  # the flow starts its guard
            # The flow died before its guard (a backend restart): compare now.
            g = ro.settings
            row = await find(db, h.host_id, plan.id, lock=True)
            if row is not None and plan_compare.not_comparable(row) is None:
                await plan_compare.start(
                    db,
                    self.plans.commands,
                    row,
                    "system",
                    int(g["guard_pairs"]),
                    float(g["guard_window_seconds"]),
                    True,
                )
            if h.state != "comparing":
                await self._set_host(db, ro, h, "comparing", None)
            return None
        if comp.state == "running":
            if h.state != "comparing":
                await self._set_host(db, ro, h, "comparing", None)
            elif (why := await self._offline_too_long(db, ro, h, online)) is not None:
                await self._set_host(
                    db, ro, h, "skipped", why + " (its plan stays installed; its guard runs on return)"
                )
            return None
        if comp.state == "done":
            await self._set_host(db, ro, h, "installed", comp.guard_reason)
            return None
        await self._set_host(db, ro, h, "failed", comp.guard_reason)
        return f"{h.host_id}: {comp.guard_reason} (the plan stays installed there)"

    async def _step(self, db: AsyncSession, rollout_id: uuid.UUID) -> tuple[bool, list[tuple[str, str]]]:
        """One turn of the state machine under the roll-out's row lock: (done, hosts to start)."""
        ro = (await db.execute(text("SELECT * FROM rollouts WHERE id = :id FOR UPDATE"), {"id": rollout_id})).first()
        if ro is None:
            return True, []

        async def hosts() -> list[Row[Any]]:
            return list(
                (
                    await db.execute(
                        text("""SELECT rh.*, h.online FROM rollout_hosts rh JOIN hosts h ON h.id = rh.host_id
                                WHERE rh.rollout_id = :id ORDER BY rh.position"""),
                        {"id": rollout_id},
                    )
                ).all()
            )

        halt = None
        for h in await hosts():
            if h.state in IN_FLIGHT:
                why = await self._settle(db, ro, h, h.online)
                halt = halt or why
        if halt is not None:
            await self._halt(db, ro, halt)
            ro = (await db.execute(text("SELECT * FROM rollouts WHERE id = :id"), {"id": rollout_id})).one()
        rows = await hosts()
        flying = [h for h in rows if h.state in IN_FLIGHT]
        starts: list[tuple[str, str]] = []
        if ro.state == "running":
            waiting = [h for h in rows if h.state not in HOST_FINAL]
            if not waiting:
                await db.execute(
                    text("""UPDATE rollouts SET state = 'completed', reason = :r, finished_at = now(),
                            updated_at = now() WHERE id = :id"""),
                    {"id": rollout_id, "r": "every wave answered"},
                )
                _audit(db, "system", "rollout_complete", rollout_id, hosts={h.host_id: h.state for h in rows})
                return True, []
            wave = min(h.wave for h in waiting)
            if wave != ro.wave:
                await db.execute(
                    text("UPDATE rollouts SET wave = :w, updated_at = now() WHERE id = :id"),
                    {"id": rollout_id, "w": wave},
                )
                _audit(
                    db,
                    "system",
                    "rollout_wave",
                    rollout_id,
                    wave=wave,
                    hosts=[h.host_id for h in rows if h.wave == wave],
                )
            for h in waiting:
                if h.wave != wave or h.state != "pending":
                    continue
                if not h.online:
                    why = await self._offline_too_long(db, ro, h, False)
                    if why is not None:
                        await self._set_host(db, ro, h, "skipped", why)
                    continue
                await self._offline_too_long(db, ro, h, True)
                starts.append((h.host_id, h.target_id))
            return False, starts
        if ro.state == "reverting":
            pending = [h for h in rows if h.state == "pending"]
            for h in pending:
                await self._set_host(db, ro, h, "skipped", "the roll-out was reverted before this host's wave")
            if flying:
                return False, []
            holding = 0
            for h in rows:
                if h.plan_id is None:
                    continue
                plan = await find(db, h.host_id, h.plan_id)
                if plan is None:
                    continue
                if plan.state == "installed":
                    holding += 1
                    try:
                        await self.plans.revert(
                            db, h.host_id, plan.id, ro.settings.get("revert_by", "system"), rollout_id=str(rollout_id)
                        )
                    except PlanError as exc:
                        log.warning("roll-out %s: %s not reverted: %s", rollout_id, h.host_id, exc.detail)
                elif plan.state in ("installing", "reverting"):
                    holding += 1
                elif plan.state == "reverted" and h.state in ("installed", "skipped", "failed"):
                    await self._set_host(
                        db, ro, h, "reverted", f"reverted everywhere by {ro.settings.get('revert_by')}"
                    )
            if holding:
                return False, []
            await db.execute(
                text("""UPDATE rollouts SET state = 'reverted', finished_at = now(), updated_at = now()
                        WHERE id = :id"""),
                {"id": rollout_id},
            )
            _audit(db, "system", "rollout_reverted", rollout_id, hosts={h.host_id: h.state for h in await hosts()})
            return True, []
        # paused, halted, completed, reverted: only hosts in flight are followed to their answer.
        return not flying, []

    async def _start_host(self, rollout_id: uuid.UUID, host: str, target: str) -> None:
        """Re-check the host's build and target, make its per-host plan, install it with the guard."""
        async with self.sessionmaker() as db:
            ro = (await db.execute(text("SELECT * FROM rollouts WHERE id = :id FOR UPDATE"), {"id": rollout_id})).one()
            h = (
                await db.execute(
                    text("SELECT * FROM rollout_hosts WHERE rollout_id = :id AND host_id = :h FOR UPDATE"),
                    {"id": rollout_id, "h": host},
                )
            ).one()
            if ro.state != "running" or h.state != "pending":
                await db.rollback()
                return
            src = await find(db, ro.plan_host_id, ro.plan_id)
            module = await self._module_of(db, src) if src is not None and ro.kind == "process" else None
            ok = src is not None and await self._still_of_build(db, ro, module, host, target)
            if src is None or src.approved_code_sha256 != ro.code_sha256:
                await self._set_host(db, ro, h, "failed", "the approved plan is gone or its approval changed")
                await self._halt(db, ro, "the approved plan is gone or its approval changed")
                await db.commit()
                return
            if not ok:
                why = await self._why_not(db, ro.kind, ro.build_id, module, host)
                await self._set_host(db, ro, h, "skipped", f"not of the plan's build any more ({why}); not touched")
                await db.commit()
                return
            conflict = await self._conflict(db, host, target, rollout_id, src.id)
            if conflict is not None:
                await self._set_host(db, ro, h, "skipped", conflict + "; not touched")
                await db.commit()
                return
            if host == ro.plan_host_id and target == src.target_id:
                plan_id = src.id
                await db.execute(
                    text("UPDATE plans SET rollout_id = :r WHERE id = :id"), {"r": rollout_id, "id": plan_id}
                )
            else:
                plan_id = await self._derive(db, ro, src, host, target)
            await db.execute(
                text("""UPDATE rollout_hosts SET plan_id = :p, state = 'installing', reason = NULL,
                        updated_at = now() WHERE rollout_id = :id AND host_id = :h"""),
                {"id": rollout_id, "h": host, "p": plan_id},
            )
            _audit(
                db,
                ro.requested_by,
                "rollout_host_installing",
                rollout_id,
                host_id=host,
                plan_id=str(plan_id),
                wave=h.wave,
                target=target,
            )
            g = ro.settings
            guard = (int(g["guard_pairs"]), float(g["guard_window_seconds"])) if ro.kind == "process" else None
            try:
                # install() commits this transaction (the roll-out's row lock with it) and starts the flow.
                await self.plans.install(db, host, plan_id, ro.requested_by, int(g["window_s"]), guard)
            except PlanError as exc:
                await db.rollback()
                async with self.sessionmaker() as db2:
                    ro2 = (
                        await db2.execute(text("SELECT * FROM rollouts WHERE id = :id FOR UPDATE"), {"id": rollout_id})
                    ).one()
                    h2 = (
                        await db2.execute(
                            text("SELECT * FROM rollout_hosts WHERE rollout_id = :id AND host_id = :h"),
                            {"id": rollout_id, "h": host},
                        )
                    ).one()
                    await self._set_host(db2, ro2, h2, "failed", f"the install was refused: {exc.detail}")
                    await self._halt(db2, ro2, f"{host}: the install was refused: {exc.detail}")
                    await db2.commit()

    async def _derive(self, db: AsyncSession, ro: Row[Any], src: Row[Any], host: str, target: str) -> uuid.UUID:
        """The per-host plan: the approved plan's code, hash and build id for this host's target, approved by
        the approval it inherits (derived_from); the agent installs it only if its code hashes to the
        approved hash, and relocates it by its own module base (delta = live base - the plan's)."""
        module = await self._module_of(db, src)
        digest = (
            await db.execute(
                text("SELECT digest FROM host_modules WHERE host_id = :h AND target_id = :t AND name = :n"),
                {"h": host, "t": target, "n": module},
            )
        ).scalar()
        pid_start = _target_pid(target)
        kb = (await db.execute(text("SELECT kernel_build_id FROM hosts WHERE id = :h"), {"h": host})).scalar()
        new_id = uuid.uuid4()
        body = "plan_json"
        if pid_start is not None:
            body = (
                "jsonb_set(jsonb_set(jsonb_set(plan_json, '{target,pid}', to_jsonb(CAST(:pid AS bigint))), "
                "'{target,start_time}', to_jsonb(CAST(:start AS bigint))), "
                "'{target,release}', to_jsonb(CAST(:rel AS text)))"
            )
        row = (
            await db.execute(
                text(f"""
            INSERT INTO plans (id, host_id, target_id, root_digest, root_function_index, root_name, options, state,
                               plan_json, plan_status, estimated, code_sha256, build_id, target_pid, target_start_time,
                               target_module, kernel_build_id, created_by, ready_at, requested_by, requested_at,
                               approved_by, approved_at, approved_code_sha256, approved_build_id, derived_from,
                               rollout_id, updated_at)
            SELECT :id, :h, :t, :d, root_function_index, root_name, options, 'approved', {body}, plan_status, estimated,
                   code_sha256, build_id, :pid, :start, target_module, CASE WHEN target_id = 'kernel' THEN :kb
                   ELSE kernel_build_id END, :by, now(), requested_by, requested_at, approved_by, approved_at,
                   approved_code_sha256, approved_build_id, id, :r, now()
            FROM plans WHERE id = :src RETURNING id, host_id, root_name, code_sha256"""),
                {
                    "id": new_id,
                    "h": host,
                    "t": target,
                    "d": digest or src.root_digest,
                    "pid": pid_start[0] if pid_start else None,
                    "start": pid_start[1] if pid_start else None,
                    "rel": f"pid {pid_start[0]}" if pid_start else None,
                    "kb": kb,
                    "by": ro.requested_by,
                    "r": ro.id,
                    "src": src.id,
                },
            )
        ).one()
        plan_audit(
            db,
            ro.requested_by,
            "plan_derived",
            row,
            rollout_id=str(ro.id),
            derived_from=str(src.id),
            approved_by=src.approved_by,
            approved_code_sha256=src.approved_code_sha256,
            approved_build_id=src.approved_build_id,
            target=target,
        )
        return new_id

    # Operator actions -----------------------------------------------------------------------------

    async def _move(
        self, db: AsyncSession, rollout_id: uuid.UUID, frm: tuple[str, ...], to: str, actor: str, action: str
    ) -> None:
        ro = (await db.execute(text("SELECT * FROM rollouts WHERE id = :id FOR UPDATE"), {"id": rollout_id})).first()
        if ro is None:
            raise RolloutError(404, "Roll-out not found")
        if ro.state not in frm:
            raise RolloutError(409, f"The roll-out is {ro.state}; this needs it {' or '.join(frm)}")
        settings = dict(ro.settings)
        if to == "reverting":
            settings["revert_by"] = actor
        await db.execute(
            text("""UPDATE rollouts SET state = :s, reason = :r, settings = CAST(:g AS jsonb), updated_at = now()
                    WHERE id = :id"""),
            {"id": rollout_id, "s": to, "r": f"{action} by {actor}", "g": orjson.dumps(settings).decode()},
        )
        _audit(db, actor, f"rollout_{action}", rollout_id, was=ro.state)

    async def pause(self, db: AsyncSession, rollout_id: uuid.UUID, actor: str) -> None:
        await self._move(db, rollout_id, ("running",), "paused", actor, "pause")

    async def resume(self, db: AsyncSession, rollout_id: uuid.UUID, actor: str) -> None:
        await self._move(db, rollout_id, ("paused",), "running", actor, "resume")

    async def revert(self, db: AsyncSession, rollout_id: uuid.UUID, actor: str) -> None:
        await self._move(db, rollout_id, ("running", "paused", "halted", "completed"), "reverting", actor, "revert")


# Reading --------------------------------------------------------------------------------------


def _public(r: Row[Any]) -> dict[str, Any]:
    g = r.settings or {}
    return {
        "id": str(r.id),
        "plan_id": str(r.plan_id),
        "plan_host_id": r.plan_host_id,
        "kind": r.kind,
        "build_id": r.build_id,
        "code_sha256": r.code_sha256,
        "requested_by": r.requested_by,
        "labels": r.labels,
        "wave_sizes": r.wave_sizes,
        "window_s": g.get("window_s"),
        "guard_pairs": g.get("guard_pairs"),
        "guard_window_seconds": g.get("guard_window_seconds"),
        "offline_wait_s": g.get("offline_wait_s"),
        "state": r.state,
        "reason": r.reason,
        "wave": r.wave,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "finished_at": r.finished_at,
    }


async def list_rollouts(db: AsyncSession, plan_id: uuid.UUID | None, limit: int) -> list[dict[str, Any]]:
    rows = (
        await db.execute(
            text("""SELECT r.*, (SELECT count(*) FROM rollout_hosts h WHERE h.rollout_id = r.id) AS hosts
                    FROM rollouts r WHERE CAST(:p AS uuid) IS NULL OR r.plan_id = :p
                    ORDER BY r.created_at DESC, r.id LIMIT :n"""),
            {"p": plan_id, "n": limit},
        )
    ).all()
    return [{**_public(r), "host_count": r.hosts} for r in rows]


async def get_rollout(db: AsyncSession, rollout_id: uuid.UUID) -> dict[str, Any] | None:
    r = (await db.execute(text("SELECT * FROM rollouts WHERE id = :id"), {"id": rollout_id})).first()
    if r is None:
        return None
    hosts = (
        await db.execute(
            text("""
        SELECT rh.*, h.hostname, h.online, p.state AS plan_state, c.summary, c.guard_action, c.state AS compare_state
        FROM rollout_hosts rh JOIN hosts h ON h.id = rh.host_id
        LEFT JOIN plans p ON p.id = rh.plan_id
        LEFT JOIN LATERAL (SELECT summary, guard_action, state FROM plan_comparisons pc
                           WHERE pc.plan_id = rh.plan_id AND pc.guard ORDER BY created_at DESC, id LIMIT 1) c ON true
        WHERE rh.rollout_id = :id ORDER BY rh.position"""),
            {"id": rollout_id},
        )
    ).all()
    out_hosts: list[dict[str, Any]] = []
    for h in hosts:
        s = h.summary or {}
        out_hosts.append(
            {
                "host_id": h.host_id,
                "hostname": h.hostname,
                "online": h.online,
                "wave": h.wave,
                "target_id": h.target_id,
                "plan_id": str(h.plan_id) if h.plan_id else None,
                "plan_state": h.plan_state,
                "state": h.state,
                "reason": h.reason,
                "offline_since": h.offline_since,
                "updated_at": h.updated_at,
                "guard": None
                if h.compare_state is None
                else {
                    "state": h.compare_state,
                    "action": h.guard_action,
                    "verdict": s.get("verdict"),
                    "share_original": s.get("share_original"),
                    "share_installed": s.get("share_installed"),
                    "change": s.get("change"),
                    "interval": s.get("interval"),
                    "confidence": s.get("confidence"),
                },
            }
        )
    waves = []
    for w, size in enumerate(r.wave_sizes or []):
        states: dict[str, int] = {}
        for x in out_hosts:
            if x["wave"] == w:
                states[x["state"]] = states.get(x["state"], 0) + 1
        waves.append({"wave": w, "size": size, "states": states})
    return {**_public(r), "host_count": len(out_hosts), "hosts": out_hosts, "waves": waves}


async def audit_trail(db: AsyncSession, rollout_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = (
        await db.execute(
            text("SELECT at, actor, action, detail FROM audit_log WHERE target = :t ORDER BY id"),
            {"t": str(rollout_id)},
        )
    ).all()
    return [{"at": a.at, "actor": a.actor, "action": a.action, "detail": a.detail} for a in rows]
