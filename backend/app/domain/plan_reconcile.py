# SPDX-License-Identifier: Apache-2.0
"""Reconciliation of plans with what agents report: plans an install flow left `installing` (the flow
died with its backend), reverts whose answer was lost, and the installs every Hello lists.
"""

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Iterable
from typing import Any

import orjson
from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.core.config import Settings
from app.domain.commands import CommandError, Commands
from app.domain.plan_records import ACTIVE_COMMAND, RECORD, audit, find
from app.protocol.proto import pb
from app.storage import audit_log

log = logging.getLogger("hotpath.plans")


async def _reconciled(db: AsyncSession, new: Row[Any], command: uuid.UUID | None, why: str, was: str) -> int:
    """Close a reconciliation: the command whose answer was lost fails with the reason, the step is
    audited and committed."""
    if command is not None:
        await db.execute(
            text("""
            UPDATE commands SET state = 'failed', finished_at = now(), error = :e
            WHERE id = :c AND state IN ('sent', 'running')"""),
            {"c": command, "e": f"its answer was lost: {why}"},
        )
    audit(db, "system", "plan_reconciled", new, result=new.state, reason=why, was=was)
    await db.commit()
    log.info("plan %s reconciled: %s (%s)", new.id, new.state, why)
    return 1


async def _set_installed(db: AsyncSession, plan_id: uuid.UUID, entry: dict[str, Any] | None) -> Row[Any]:
    """The plan is installed, as the agent lists it (`entry`, kept as the install's detail)."""
    return (
        await db.execute(
            text(f"""
        UPDATE plans SET state = 'installed', installed_at = coalesce(installed_at, now()),
          install_detail = CAST(:d AS jsonb), error = NULL, updated_at = now()
        WHERE id = :id RETURNING {RECORD}"""),
            {"id": plan_id, "d": orjson.dumps(entry).decode()},
        )
    ).one()


async def _set_install_failed(db: AsyncSession, plan_id: uuid.UUID, why: str) -> Row[Any]:
    """The plan's install failed, for the reason `why`."""
    return (
        await db.execute(
            text(f"""
        UPDATE plans SET state = 'install_failed', error = :e, updated_at = now()
        WHERE id = :id RETURNING {RECORD}"""),
            {"id": plan_id, "e": why},
        )
    ).one()


async def _settle_reverting(
    db: AsyncSession, row: Row[Any], entry: dict[str, Any] | None, source: str
) -> tuple[Row[Any], str]:
    """A `reverting` plan whose RevertPlan answer is lost, settled from what the agent reports of it
    (`entry`: its listing in `source`, or None when not listed): no longer installed (not listed, or
    listed with a kept heap or a gone process) → `reverted`; still installed → `installed` again, with
    the error that the revert did not complete. Returns (the changed row, the reason)."""
    if entry is None or entry.get("state") in ("heap_kept", "process_gone"):
        why = "settled from the agent's report: " + (
            f"{source} does not list the plan (the revert finished, the agent's start-up recovery "
            "finished it, or its process exited)"
            if entry is None
            else f"{source} lists the plan as {entry.get('state')}"
        )
        new = (
            await db.execute(
                text(f"""
            UPDATE plans SET state = 'reverted', reverted_at = now(), revert_detail = CAST(:d AS jsonb),
              error = NULL, updated_at = now()
            WHERE id = :id RETURNING {RECORD}"""),
                {"id": row.id, "d": orjson.dumps({"status": "reconciled", "reason": why, "listed": entry}).decode()},
            )
        ).one()
    else:
        why = f"the revert did not complete: {source} still lists the plan as installed"
        new = (
            await db.execute(
                text(f"""
            UPDATE plans SET state = 'installed', error = :e, updated_at = now()
            WHERE id = :id RETURNING {RECORD}"""),
                {"id": row.id, "e": why},
            )
        ).one()
    return new, why


UNKNOWN_INSTALLS_NAMED = 16  # ids an unknown-installs audit row names; the count says how many there were


async def _audit_unknown_installs(db: AsyncSession, host_id: str, ids: list[str]) -> None:
    """Audit the installs a Hello lists that no plan of the host has: ONE row per host naming how many and
    the first few ids (an agent may list 1024), and only when the set differs from the one this host's
    last such row named (the fingerprint of the sorted ids), so reconnects with the same list add none."""
    if not ids:
        return
    fingerprint = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    last = (
        await db.execute(
            text("""
        SELECT detail->>'ids_sha256' FROM audit_log
        WHERE action = 'plan_install_unknown' AND actor = :a AND target = :h ORDER BY id DESC LIMIT 1"""),
            {"a": f"agent:{host_id}", "h": host_id},
        )
    ).scalar_one_or_none()
    if last == fingerprint:
        return
    audit_log.record(
        db,
        f"agent:{host_id}",
        "plan_install_unknown",
        host_id,
        {
            "host_id": host_id,
            "count": len(ids),
            "plan_ids": ids[:UNKNOWN_INSTALLS_NAMED],
            "ids_sha256": fingerprint,
            "reason": "no plan of this host has these ids",
        },
    )
    log.warning(
        "host %s lists %d installs that no plan of it has (%s%s)",
        host_id,
        len(ids),
        ", ".join(ids[:3]),
        ", ..." if len(ids) > 3 else "",
    )


class Reconciliation:
    """The part of Plans that settles plans from the agents' reports (Plans inherits it)."""

    settings: Settings
    sessionmaker: async_sessionmaker[AsyncSession]
    commands: Commands
    tasks: dict[str, asyncio.Task[None]]

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
            rows = (
                await db.execute(
                    text("""
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
                    {"g": s.plan_reconcile_grace_s},
                )
            ).all()
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
            rows = (
                await db.execute(
                    text("""
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
                    {"g": g},
                )
            ).all()
            stopped = 0
            for r in rows:
                if str(r.plan_id) in self.tasks:
                    continue
                await self.commands.create(db, r.host_id, "stop_measurement", {"measurement_id": r.mid}, "system")
                stopped += 1
            if stopped:
                log.info("reconcile: stopping %d measurement window(s) their install flow left running", stopped)
            await db.commit()

    async def _list_installed(self, host_id: str) -> dict[str, dict[str, Any]] | None:
        try:
            async with self.sessionmaker() as db:
                cmd, _ = await self.commands.create(db, host_id, "list_installed", {}, "system")
                await db.commit()
        except CommandError:
            return None
        done = await self.commands.wait(cmd["id"], 60)
        if done is None or done["state"] != "done" or not done["result"]:
            log.warning(
                "reconcile: host %s did not list its installs (%s)",
                host_id,
                (done or {}).get("error") or "no answer in 60 s",
            )
            return None
        return {x["id"]: x for x in done["result"]["installed"]}

    async def _settle(self, r: Row[Any], listed: dict[str, dict[str, Any]]) -> int:
        if r.state == "reverting":
            return await self._settle_revert(r, listed)
        entry = listed.get(str(r.id))
        async with self.sessionmaker() as db:
            row = await find(db, r.host_id, r.id, lock=True)
            if row is None or row.state != "installing" or row.install_command != r.install_command:
                return 0
            if entry is not None and entry.get("state") not in ("installed",):
                return 0  # the agent is still on it, or recovering it at start-up: a later round
            lost = "the backend stopped during the install flow"
            if entry is not None:
                new = await _set_installed(db, r.id, entry)
                why = f"{lost}; the agent lists the plan as installed"
            else:
                why = (
                    f"{lost} before it sent the install"
                    if r.install_command is None
                    else f"{lost} and the install's answer was lost; the agent does not list the plan as installed"
                )
                new = await _set_install_failed(db, r.id, why)
            return await _reconciled(db, new, r.install_command, why, "installing")

    async def _settle_revert(self, r: Row[Any], listed: dict[str, dict[str, Any]]) -> int:
        """A plan left `reverting` by a RevertPlan whose answer did not come, from the agent's list (which
        answers after the revert, if the agent was given it)."""
        entry = listed.get(str(r.id))
        async with self.sessionmaker() as db:
            row = await find(db, r.host_id, r.id, lock=True)
            if row is None or row.state != "reverting" or row.revert_command != r.revert_command:
                return 0
            if entry is not None and entry.get("state") not in ("installed", "heap_kept", "process_gone"):
                return 0  # the agent is still on it, or finishing it at start-up: a later round
            new, why = await _settle_reverting(db, row, entry, "its ListInstalled")
            return await _reconciled(db, new, r.revert_command, why, "reverting")

    async def on_hello(self, host_id: str, installs: Iterable["pb.InstalledPlan"]) -> int:
        """Settle this host's plans from Hello.installs (checked for shape by agent_input.check_installs): the
        installs the agent's journals hold after its start-up recovery; called only when Hello says the list
        is complete (installs_listed: an agent without a state folder, or one that could not read its
        journals, changes no plan). An install is the plan's only if its
        code hash is the approved one and its process the plan's (pid and start time; a kernel install's pid
        is the agent holding it, not compared); anything else changes
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
            rows = (
                await db.execute(
                    text("""
                SELECT p.*, c.state AS cmd_state, rc.state AS revert_cmd_state FROM plans p
                LEFT JOIN commands c ON c.id = p.install_command
                LEFT JOIN commands rc ON rc.id = p.revert_command
                WHERE p.host_id = :h
                  AND (p.state IN ('installing', 'installed', 'reverting') OR CAST(p.id AS text) = ANY(:ids))
                FOR UPDATE OF p"""),
                    {"h": host_id, "ids": list(listed)},
                )
            ).all()
            known = {str(r.id) for r in rows}
            await _audit_unknown_installs(db, host_id, sorted(set(listed) - known))
            for r in rows:
                if str(r.id) in self.tasks:
                    continue
                i = listed.get(str(r.id))
                # A kernel install names the agent process holding it (its /dev/hotpath), not a target's.
                if i is not None and (
                    i.code_sha256 != r.approved_code_sha256
                    or (r.target_id != "kernel" and (i.pid != r.target_pid or i.start_time != r.target_start_time))
                ):
                    audit(
                        db,
                        f"agent:{host_id}",
                        "plan_install_unknown",
                        r,
                        state=i.state,
                        pid=i.pid,
                        listed_code_sha256=i.code_sha256,
                        reason="the install is not the approved plan in the plan's process",
                    )
                    log.warning("host %s lists install %s that is not the approved plan in its process", host_id, r.id)
                    continue
                entry = (
                    None
                    if i is None
                    else {
                        "id": i.plan_id,
                        "state": i.state,
                        "pid": i.pid,
                        "start_time": i.start_time,
                        "root": i.root,
                        "code_sha256": i.code_sha256,
                        "heap": f"0x{i.heap:x}",
                        "heap_len": i.heap_len,
                    }
                )
                new, why = None, None
                if r.state == "installing" and i is not None and i.state == "installed":
                    new = await _set_installed(db, r.id, entry)
                    why = "the agent's Hello lists the plan as installed"
                elif (
                    r.state == "installing"
                    and i is None
                    and (r.install_command is None or r.cmd_state in ("done", "failed", "cancelled"))
                ):
                    why = "no install flow runs and the agent's Hello does not list the plan as installed"
                    new = await _set_install_failed(db, r.id, why)
                elif r.state == "installed" and (i is None or i.state in ("heap_kept", "process_gone")):
                    why = (
                        "the agent's Hello does not list the plan: its journal is gone (reverted at the "
                        "agent's start-up, or its process exited)"
                        if i is None
                        else f"the agent's Hello lists the plan as {i.state}"
                    )
                    new = (
                        await db.execute(
                            text(f"""
                        UPDATE plans SET state = 'reverted', reverted_at = now(),
                          revert_detail = CAST(:d AS jsonb), updated_at = now()
                        WHERE id = :id RETURNING {RECORD}"""),
                            {
                                "id": r.id,
                                "d": orjson.dumps({"status": "reconciled", "reason": why, "listed": entry}).decode(),
                            },
                        )
                    ).one()
                elif r.state == "reverting" and (
                    i is None
                    or i.state in ("heap_kept", "process_gone")
                    or (i.state == "installed" and r.revert_cmd_state not in ACTIVE_COMMAND)
                ):
                    new, why = await _settle_reverting(db, r, entry, "the agent's Hello")
                if new is None:
                    continue
                lost = {"installing": r.install_command, "reverting": r.revert_command}.get(r.state)
                if lost is not None:
                    # Its answer, if the agent kept one, is not wanted any more: the command is not sent
                    # again, and a replay of it that still comes is an answer to an ended command.
                    await db.execute(
                        text("""
                        UPDATE commands SET state = 'failed', finished_at = now(), error = :e
                        WHERE id = :c AND state IN ('queued', 'sent', 'running')"""),
                        {"c": lost, "e": f"its answer was lost: {why}"},
                    )
                audit(db, "system", "plan_reconciled", new, result=new.state, reason=why, was=r.state, source="hello")
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
