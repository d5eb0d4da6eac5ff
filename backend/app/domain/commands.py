# SPDX-License-Identifier: Apache-2.0
"""Commands for agents: stored, routed to the replica holding the agent's stream, and followed to
their end.

A command is a row in `commands` from the moment a user asks for it: `queued`, then `sent` (a replica
holding the host's stream sent it), `running` (the agent reported progress), and `done`, `failed` or
`cancelled`. Its id is the client's idempotency key: asking again with the same id returns the same
command instead of a second one. Any replica may accept the request: it stores the row and notifies
`hotpath_commands` (app.core.bus); the replica that holds the stream claims queued rows (an atomic update,
so only one sends) and sends them. After a reconnect (of the agent or of a backend), commands still
sent or running are sent again — the agent runs an id once and repeats its result. A queued command
whose host stays away longer than `command_queue_timeout_s` fails with that reason. Cancel drops a
queued command at once and asks the agent to stop a sent or running one. Every request, send and end
is audited with who and when.

What a command's result means beyond the command row belongs to its kind: each kind has its handlers
(`Commands.handle`), those of targets, measurements and disassemblies here, those of plans registered
by app.domain.plans, so this module knows no plan.
"""

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

import orjson
from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.core import bus
from app.core.config import Settings
from app.core.live import LiveHub
from app.core.metrics import Metrics
from app.core.tasks import cancel_and_wait
from app.domain.sessions import AgentRegistry, AgentSession
from app.protocol import agent_input
from app.protocol.agent_input import InvalidInput
from app.protocol.proto import pb
from app.storage import audit_log, functions, measurements, targets

log = logging.getLogger("hotpath.commands")
CommandKind = Literal[
    "inspect_function",
    "attach_target",
    "detach_target",
    "start_measurement",
    "stop_measurement",
    "cancel",
    "make_plan",
    "install_plan",
    "revert_plan",
    "list_installed",
    "compare_plan",
]
KINDS: tuple[str, ...] = get_args(CommandKind)  # the kinds the API's shapes name too (api/schemas/commands.py)
ACTIVE = ("queued", "sent", "running")
FINAL = ("done", "failed", "cancelled")


class CommandError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class HostOffline(Exception):
    pass


class CommandTimeout(Exception):
    pass


class CommandFailed(Exception):
    pass


# What a result changes besides the command: (db, the agent's session, the command row, the result) ->
# (the result to store, an error that makes it fail).
Answer = tuple[dict[str, Any] | None, str | None]
OnResult = Callable[[AsyncSession, AgentSession, Any, "pb.CommandResult"], Awaitable[Answer]]


@dataclass
class KindHandlers:
    """What one kind of command does with its answer, besides ending the command."""

    on_result: OnResult
    # once the command ended (done, failed, cancelled or expired), in its transaction
    on_end: Callable[[AsyncSession, Any], Awaitable[None]] | None = None
    # once that transaction committed: tell the consoles (host id, command row)
    published: Callable[[str, Any], Awaitable[None]] | None = None
    # the JSON a command of this kind carries besides its params (command row) -> text
    payload: Callable[[Any], Awaitable[str]] | None = None
    # a cancel of one sent or running while its host's agent is away ends it at once, instead of waiting
    # for the agent: for kinds whose effects the agent's Hello settles on its return, not their answer
    ends_when_away: bool = False


async def _plain(db: AsyncSession, session: AgentSession, row: Any, result: "pb.CommandResult") -> Answer:
    return ({} if result.ok else None), None


def public(r: Row[Any]) -> dict[str, Any]:
    return {
        "id": str(r.id),
        "host_id": r.host_id,
        "kind": r.kind,
        "params": r.params,
        "state": r.state,
        "progress": r.progress,
        "message": r.message,
        "result": r.result,
        "error": r.error,
        "created_by": r.created_by,
        "created_at": r.created_at,
        "sent_at": r.sent_at,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "cancel_requested": r.cancel_requested,
    }


def to_pb(row: Row[Any], plan_json: str = "") -> "pb.Command":
    """The command for the agent; an install carries the plan's JSON (kept in plans, not in params)."""
    p = row.params
    c = pb.Command(id=str(row.id))
    if row.kind == "inspect_function":
        c.inspect_function.CopyFrom(
            pb.InspectFunction(digest=p["digest"], function_index=p["function_index"], target=p.get("target") or "")
        )
    elif row.kind == "attach_target":
        c.attach_target.CopyFrom(pb.AttachTarget(pid=p.get("pid") or 0, command=p.get("command") or ""))
    elif row.kind == "detach_target":
        c.detach_target.CopyFrom(pb.DetachTarget(target=p["target"]))
    elif row.kind == "start_measurement":
        c.start_measurement.CopyFrom(measurements.request_to_pb(p))
    elif row.kind == "stop_measurement":
        c.stop_measurement.CopyFrom(pb.StopMeasurement(measurement_id=p["measurement_id"]))
    elif row.kind == "cancel":
        c.cancel.CopyFrom(pb.CancelCommand(command_id=p["command_id"]))
    elif row.kind == "make_plan":
        c.make_plan.CopyFrom(
            pb.MakePlan(
                plan_id=p["plan_id"],
                target=p["target"],
                digest=p["digest"] or "",
                function_index=p["function_index"] or 0,
                seconds=p.get("seconds") or 0,
                join_fraction=p.get("join_fraction") or 0,
                stall_threshold=p.get("stall_threshold") or 0,
                max_functions=p.get("max_functions") or 0,
                measurement_id=p.get("measurement_id") or "",
                hot_set=bool(p.get("hot_set")),
            )
        )
    elif row.kind == "install_plan":
        c.install_plan.CopyFrom(
            pb.InstallPlan(
                plan_id=p["plan_id"],
                plan_json=plan_json,
                approved_code_sha256=p["approved_code_sha256"],
                target=p["target"],
                entry_only=bool(p.get("entry_only")),
            )
        )
    elif row.kind == "revert_plan":
        c.revert_plan.CopyFrom(pb.RevertPlan(plan_id=p["plan_id"], target=p["target"]))
    elif row.kind == "list_installed":
        c.list_installed.CopyFrom(pb.ListInstalled())
    elif row.kind == "compare_plan":
        c.compare_plan.CopyFrom(
            pb.ComparePlan(
                plan_id=p["plan_id"], target=p["target"], pairs=p["pairs"], window_seconds=p["window_seconds"]
            )
        )
    return c


class Commands:
    def __init__(
        self,
        settings: Settings,
        sessionmaker: async_sessionmaker[AsyncSession],
        hub: LiveHub,
        metrics: Metrics,
        agents: AgentRegistry,
        replica_id: str,
    ) -> None:
        self.settings = settings
        self.sessionmaker = sessionmaker
        self.hub = hub
        self.metrics = metrics
        self.agents = agents
        self.replica_id = replica_id
        self.waiters: dict[str, asyncio.Event] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.handlers: dict[str, KindHandlers] = {}
        self.handle("inspect_function", self._on_disassembly)
        self.handle("attach_target", self._on_targets)
        self.handle("detach_target", self._on_targets)
        self.handle("start_measurement", self._on_measurement, on_end=self._start_ended)
        self.handle("stop_measurement", self._on_measurement)

    def handle(self, kind: str, on_result: OnResult, **rest: Any) -> None:
        """Register what commands of `kind` do with their answers (KindHandlers)."""
        assert kind in KINDS
        self.handlers[kind] = KindHandlers(on_result, **rest)

    def _handlers(self, kind: str) -> KindHandlers:
        return self.handlers.get(kind) or KindHandlers(_plain)

    # Requests ------------------------------------------------------------------------------------

    async def create(
        self,
        db: AsyncSession,
        host_id: str,
        kind: str,
        params: dict[str, Any],
        actor: str,
        command_id: uuid.UUID | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Store a command (or find the one with this id); returns (command, created). The caller
        commits; the notification goes out with the commit."""
        assert kind in KINDS
        cid = command_id or uuid.uuid4()
        row = (
            await db.execute(
                text("""
            INSERT INTO commands (id, host_id, kind, params, state, created_by)
            VALUES (:id, :h, :k, CAST(:p AS jsonb), 'queued', :by)
            ON CONFLICT (id) DO NOTHING RETURNING *"""),
                {"id": cid, "h": host_id, "k": kind, "p": orjson.dumps(params).decode(), "by": actor},
            )
        ).first()
        if row is None:
            have = (await db.execute(text("SELECT * FROM commands WHERE id = :id"), {"id": cid})).one()
            if have.host_id != host_id or have.kind != kind:
                raise CommandError(409, "A command with this id exists for another host or of another kind")
            return public(have), False
        audit_log.record(
            db, actor, "command_requested", host_id, {"command_id": str(cid), "kind": kind, "params": params}
        )
        await db.execute(text("SELECT pg_notify(:ch, :h)"), {"ch": bus.COMMANDS, "h": host_id})
        self.metrics.commands_sent.labels(kind).inc()
        return public(row), True

    async def cancel(self, db: AsyncSession, host_id: str, command_id: uuid.UUID, actor: str) -> dict[str, Any]:
        row = (
            await db.execute(
                text("SELECT * FROM commands WHERE id = :id AND host_id = :h FOR UPDATE"),
                {"id": command_id, "h": host_id},
            )
        ).first()
        if row is None:
            raise CommandError(404, "Command not found")
        if row.state in FINAL:
            raise CommandError(409, f"The command has ended ({row.state})")
        if row.kind == "cancel":
            raise CommandError(409, "A cancel cannot be cancelled")
        audit_log.record(
            db, actor, "command_cancel_requested", host_id, {"command_id": str(command_id), "state": row.state}
        )
        away = (
            row.state != "queued"
            and self._handlers(row.kind).ends_when_away
            and not (await db.execute(text("SELECT online FROM hosts WHERE id = :h"), {"h": host_id})).scalar()
        )
        if not row.cancel_requested and row.state != "queued":
            # The agent is told too (now, or when it returns, should it still run the command).
            await db.execute(text("UPDATE commands SET cancel_requested = true WHERE id = :id"), {"id": command_id})
            await self.create(db, host_id, "cancel", {"command_id": str(command_id)}, actor)
        if row.state == "queued" or away:
            row = (
                await db.execute(
                    text("""
                UPDATE commands SET state = 'cancelled', cancel_requested = true, finished_at = now(),
                  error = :e WHERE id = :id RETURNING *"""),
                    {
                        "id": command_id,
                        "e": "cancelled while the host's agent was away" if away else "cancelled before it was sent",
                    },
                )
            ).one()
            await self._after_end(db, row)
            await db.execute(text("SELECT pg_notify(:ch, :id)"), {"ch": bus.COMMAND_DONE, "id": str(command_id)})
            return public(row)
        row = (await db.execute(text("SELECT * FROM commands WHERE id = :id"), {"id": command_id})).one()
        return public(row)

    async def wait(self, command_id: str, timeout: float) -> dict[str, Any] | None:
        """Wait until a command ends (on any replica); its row, or None on timeout."""
        event = self.waiters.setdefault(command_id, asyncio.Event())
        try:
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                async with self.sessionmaker() as db:
                    row = (
                        await db.execute(text("SELECT * FROM commands WHERE id = :id"), {"id": uuid.UUID(command_id)})
                    ).first()
                if row is not None and row.state in FINAL:
                    return public(row)
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    return None
                try:
                    # Notifications wake us; the poll covers one lost while the bus reconnects.
                    await asyncio.wait_for(event.wait(), min(left, 1.0))
                except TimeoutError:
                    pass
                event.clear()
        finally:
            self.waiters.pop(command_id, None)

    # Disassemblies -------------------------------------------------------------------------------

    async def inspect_function(self, host_id: str, target: str, digest: str, index: int, actor: str) -> list[Any]:
        """Ask the host's agent (through whichever replica holds its stream) to decode a function; the
        instructions are cached by the replica that got the answer. Returns
        [[offset, length, hex, text], ...]."""
        async with self.sessionmaker() as db:
            if not (await db.execute(text("SELECT online FROM hosts WHERE id = :h"), {"h": host_id})).scalar():
                raise HostOffline(host_id)
            row, _ = await self.create(
                db, host_id, "inspect_function", {"digest": digest, "function_index": index, "target": target}, actor
            )
            await db.commit()
        await self.dispatch(host_id)
        done = await self.wait(row["id"], self.settings.command_timeout_s)
        if done is None:
            async with self.sessionmaker() as db:
                await db.execute(
                    text("""
                    UPDATE commands SET state = 'failed', error = 'no answer within the time allowed',
                      finished_at = now() WHERE id = :id AND state IN ('queued', 'sent', 'running')"""),
                    {"id": uuid.UUID(row["id"])},
                )
                await db.commit()
            raise CommandTimeout(row["id"])
        if done["state"] != "done":
            raise CommandFailed(agent_input.excerpt(done["error"] or done["state"], 300))
        async with self.sessionmaker() as db:
            instructions = await functions.cached_instructions(db, digest, index)
        if instructions is None:
            raise CommandFailed("the result carried no disassembly")
        return instructions

    async def cache_instructions(self, digest: str, index: int, result: "pb.CommandResult") -> None:
        """Check and cache a disassembly an agent returned."""
        if not result.HasField("disassembly"):
            raise CommandFailed("the result carried no disassembly")
        instructions = []
        for i in result.disassembly.instructions:
            if (
                i.length > 15
                or len(i.bytes) > 15
                or i.offset > agent_input.INT32_MAX
                or len(i.text) > 256
                or agent_input._CONTROL.search(i.text)
            ):
                raise CommandFailed("the agent sent a malformed instruction")
            instructions.append([i.offset, i.length, i.bytes.hex(), i.text])
        async with self.sessionmaker() as db:
            await db.execute(
                text("""
                INSERT INTO instruction_cache (digest, index, instructions) VALUES (:d, :i, CAST(:ins AS jsonb))
                ON CONFLICT (digest, index) DO NOTHING"""),
                {"d": digest, "i": index, "ins": orjson.dumps(instructions).decode()},
            )
            await db.commit()

    # Routing -------------------------------------------------------------------------------------

    async def on_notify(self, channel: str, payload: str) -> None:
        if channel == bus.COMMANDS:
            await self.dispatch(payload)
        elif channel == bus.COMMAND_DONE:
            event = self.waiters.get(payload)
            if event is not None:
                event.set()

    async def dispatch(self, host_id: str) -> int:
        """Send this host's queued commands if this replica holds its stream; returns how many."""
        session = self.agents.sessions.get(host_id)
        if session is None or session.closed or not session.welcomed:
            return 0
        async with self.sessionmaker() as db:
            rows = (
                await db.execute(
                    text("""
                UPDATE commands SET state = 'sent', sent_at = now(), replica = :r, sends = sends + 1
                WHERE host_id = :h AND state = 'queued' RETURNING *"""),
                    {"h": host_id, "r": self.replica_id},
                )
            ).all()
            for r in rows:
                audit_log.record(
                    db,
                    f"replica:{self.replica_id}",
                    "command_sent",
                    host_id,
                    {"command_id": str(r.id), "kind": r.kind, "requested_by": r.created_by},
                )
            await db.commit()
        for r in sorted(rows, key=lambda r: r.created_at):
            await self._send(session, r)
        return len(rows)

    async def resend(self, session: AgentSession) -> None:
        """After a (re)connect: send again what was sent or running (the agent answers an id once)."""
        async with self.sessionmaker() as db:
            rows = (
                await db.execute(
                    text("""
                UPDATE commands SET replica = :r, sends = sends + 1
                WHERE host_id = :h AND state IN ('sent', 'running') RETURNING *"""),
                    {"h": session.host_id, "r": self.replica_id},
                )
            ).all()
            await db.commit()
        for r in sorted(rows, key=lambda r: r.created_at):
            await self._send(session, r)
        await self.dispatch(session.host_id)

    async def _send(self, session: AgentSession, row: Row[Any]) -> None:
        payload = self._handlers(row.kind).payload
        plan_json = await payload(row) if payload is not None else ""
        try:
            await session.send(pb.ServerMessage(command=to_pb(row, plan_json)))
        except Exception:  # noqa: BLE001 - the stream is ending; the command is resent on reconnect
            log.info("host %s: command %s stays sent until the agent reconnects", session.host_id, row.id)

    # What agents report --------------------------------------------------------------------------

    async def on_progress(self, host_id: str, progress: "pb.Progress") -> None:
        try:
            cid = uuid.UUID(progress.command_id)
        except ValueError:
            raise InvalidInput(
                f"Progress for a command id that is not a UUID: {agent_input.excerpt(progress.command_id)}"
            ) from None
        agent_input.text(progress.message, "Progress.message", agent_input.MAX_DETAIL, empty=True)
        if not 0 <= progress.fraction <= 1:
            raise InvalidInput("Progress.fraction is outside [0, 1]")
        async with self.sessionmaker() as db:
            row = (
                await db.execute(
                    text("""
                UPDATE commands SET state = 'running', progress = :f, message = :m,
                  started_at = coalesce(started_at, now())
                WHERE id = :id AND host_id = :h AND state IN ('sent', 'running') RETURNING *"""),
                    {"id": cid, "h": host_id, "f": progress.fraction, "m": progress.message},
                )
            ).first()
            await db.commit()
        if row is not None:
            self.hub.publish(f"host:{host_id}", {"type": "command", "command": _event(row)})

    async def on_result(self, session: AgentSession, result: "pb.CommandResult") -> None:
        host_id = session.host_id
        try:
            cid = uuid.UUID(result.command_id)
        except ValueError:
            log.warning(
                "host %s: result for a command id that is not ours: %s", host_id, agent_input.excerpt(result.command_id)
            )
            return
        agent_input.text(result.error, "CommandResult.error", agent_input.MAX_DETAIL, empty=True)
        async with self.sessionmaker() as db:
            row = (
                await db.execute(
                    text("SELECT * FROM commands WHERE id = :id AND host_id = :h FOR UPDATE"), {"id": cid, "h": host_id}
                )
            ).first()
            if row is None or row.state in FINAL:
                await db.rollback()
                return  # an answer to a command that ended already (sent again after a reconnect)
            state = "cancelled" if result.cancelled else "done" if result.ok else "failed"
            outcome, error = await self._handlers(row.kind).on_result(db, session, row, result)
            if error is not None:
                state = "failed"
            row = (
                await db.execute(
                    text("""
                UPDATE commands SET state = :s, result = CAST(:r AS jsonb), error = :e, finished_at = now(),
                  progress = CASE WHEN :done THEN 1 ELSE progress END
                WHERE id = :id RETURNING *"""),
                    {
                        "id": cid,
                        "s": state,
                        "done": state == "done",
                        "r": orjson.dumps(outcome).decode() if outcome is not None else None,
                        "e": error
                        if error is not None
                        else (None if result.ok else result.error or "the agent gave no reason"),
                    },
                )
            ).one()
            await self._after_end(db, row)
            audit_log.record(
                db,
                f"agent:{host_id}",
                "command_finished",
                host_id,
                {"command_id": str(cid), "kind": row.kind, "state": state, "error": row.error},
            )
            await db.execute(text("SELECT pg_notify(:ch, :id)"), {"ch": bus.COMMAND_DONE, "id": str(cid)})
            await db.commit()
        event = self.waiters.get(str(cid))
        if event is not None:
            event.set()
        self.hub.publish(f"host:{host_id}", {"type": "command", "command": _event(row)})
        if row.kind in ("start_measurement", "stop_measurement"):
            mid = row.params.get("measurement_id")
            self.hub.publish(f"measurement:{mid}", {"type": "measurement", "measurement_id": mid, "host_id": host_id})
        if row.kind in ("attach_target", "detach_target"):
            self.hub.publish(f"host:{host_id}", {"type": "targets", "host_id": host_id})
        published = self._handlers(row.kind).published
        if published is not None:
            await published(host_id, row)

    # What results change, by kind ----------------------------------------------------------------

    async def _on_disassembly(
        self, db: AsyncSession, session: AgentSession, row: Any, result: "pb.CommandResult"
    ) -> tuple[dict[str, Any] | None, str | None]:
        if not result.ok:
            return None, None
        d = result.disassembly
        if (
            result.WhichOneof("kind") != "disassembly"
            or d.digest != row.params["digest"]
            or d.function_index != row.params["function_index"]
        ):
            return None, "the agent's answer is not the disassembly of the function asked for"
        try:
            await self.cache_instructions(d.digest, d.function_index, result)
        except CommandFailed as exc:
            return None, str(exc)
        return {"instructions": len(d.instructions)}, None

    async def _on_targets(
        self, db: AsyncSession, session: AgentSession, row: Any, result: "pb.CommandResult"
    ) -> tuple[dict[str, Any] | None, str | None]:
        conn = await db.connection()
        if not result.ok:
            return None, None
        if result.WhichOneof("kind") != "targets":
            return None, "the agent's answer carried no targets"
        agent_input.check_targets(result.targets.targets)
        await targets.store(conn, session.host_id, result.targets.targets, complete_list=False)
        session.add_targets(result.targets.targets)
        return {
            "targets": [
                {"id": t.id, "pid": t.pid, "command": t.command, "state": agent_input.TARGET_STATES[t.state]}
                for t in result.targets.targets
            ]
        }, None

    async def _on_measurement(
        self, db: AsyncSession, session: AgentSession, row: Any, result: "pb.CommandResult"
    ) -> tuple[dict[str, Any] | None, str | None]:
        kind = row.kind
        conn = await db.connection()
        mid = row.params["measurement_id"]
        if not result.ok:
            if kind == "start_measurement":
                detail = "cancelled before it was armed" if result.cancelled else result.error or "refused by the agent"
                await measurements.fail(conn, mid, detail)
            return None, None
        if result.WhichOneof("kind") != "measurement":
            return None, "the agent's answer carried no measurement"
        info = result.measurement
        agent_input.check_measurement_info(info)
        if info.measurement_id != mid:
            raise InvalidInput("a measurement result names another measurement")
        await measurements.store_info(conn, session.host_id, info)
        session.measurement_rows[mid] = len(info.resources)
        if kind == "start_measurement":
            await conn.execute(
                text("UPDATE measurements SET start_command = :c WHERE id = :m"), {"c": row.id, "m": mid}
            )
        return {
            "measurement_id": mid,
            "state": agent_input.MEASUREMENT_STATES[info.state],
            "resources": len(info.resources),
        }, None

    async def _after_end(self, db: AsyncSession, row: Any) -> None:
        on_end = self._handlers(row.kind).on_end
        if on_end is not None:
            await on_end(db, row)

    async def _start_ended(self, db: AsyncSession, row: Any) -> None:
        """A cancelled or failed start leaves its measurement failed."""
        if row.state in ("cancelled", "failed"):
            await measurements.fail(
                await db.connection(), row.params["measurement_id"], row.error or f"the start command was {row.state}"
            )

    # Upkeep --------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_loop(), name="command-sweep")

    async def stop(self) -> None:
        await cancel_and_wait(self._sweeper)
        self._sweeper = None

    async def _sweep_loop(self) -> None:
        interval = self.settings.command_sweep_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except Exception:  # noqa: BLE001 - the database may be restarting; next round
                log.warning("the command sweep failed; next round in %g s", interval)

    async def sweep(self, now: datetime | None = None) -> None:
        """Send what is queued for this replica's hosts (a notification may have been lost) and fail
        commands whose host stayed away too long."""
        for host_id in list(self.agents.sessions):
            await self.dispatch(host_id)
        limit = self.settings.command_queue_timeout_s
        async with self.sessionmaker() as db:
            rows = (
                await db.execute(
                    text("""
                UPDATE commands c SET state = 'failed', finished_at = now(),
                  error = 'the host''s agent was not connected for ' || :limit || ' s; it was not run'
                FROM hosts h
                WHERE c.host_id = h.id AND c.state IN ('queued', 'sent') AND NOT h.online
                  AND coalesce(c.sent_at, c.created_at) < coalesce(CAST(:now AS timestamptz), now())
                      - make_interval(secs => :limit)
                RETURNING c.*"""),
                    {"limit": limit, "now": now},
                )
            ).all()
            for r in rows:
                await self._after_end(db, r)
                audit_log.record(db, "system", "command_expired", r.host_id, {"command_id": str(r.id), "kind": r.kind})
                await db.execute(text("SELECT pg_notify(:ch, :id)"), {"ch": bus.COMMAND_DONE, "id": str(r.id)})
            await db.commit()


def _event(row: Row[Any]) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "host_id": row.host_id,
        "kind": row.kind,
        "state": row.state,
        "progress": row.progress,
        "message": row.message,
        "error": row.error,
    }


async def list_commands(session: AsyncSession, host_id: str, limit: int, state: str | None) -> list[dict[str, Any]]:
    where = "host_id = :h" + (" AND state = :s" if state else "")
    rows = await session.execute(
        text(f"SELECT * FROM commands WHERE {where} ORDER BY created_at DESC LIMIT :l"),
        {"h": host_id, "s": state, "l": limit},
    )
    return [public(r) for r in rows]


async def get_command(session: AsyncSession, host_id: str, command_id: uuid.UUID) -> dict[str, Any] | None:
    row = (
        await session.execute(
            text("SELECT * FROM commands WHERE id = :id AND host_id = :h"), {"id": command_id, "h": host_id}
        )
    ).first()
    return public(row) if row else None
