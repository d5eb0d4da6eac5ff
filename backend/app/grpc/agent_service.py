# SPDX-License-Identifier: Apache-2.0
"""AgentService.Connect: the server end of each agent's long-lived stream, and the registry of
connected agents that routes use to send commands.

One stream per host: a second stream with the same host id replaces the first (the old handler is
cancelled; an agent that restarts quickly must not be shown offline by its own predecessor). Catalog
pieces are content-addressed and stored once: Welcome names only pieces not yet complete, and while
one stream is sending a piece other streams' chunks of it are ignored. Commands are matched to their
result by id through a future per command.
"""
import asyncio
import logging
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

import grpc
import orjson
from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert

from app import catalog, crud, samples
from app.core.security import agent_token_matches
from app.models import Host, HostModule
from app.proto import pb, pb_grpc
from app.runtime import Runtime

log = logging.getLogger("hotpath.agents")
DIGEST_RE = re.compile(r"^[0-9a-f]{1,64}$")


class HostOffline(Exception):
    pass


class CommandTimeout(Exception):
    pass


class CommandFailed(Exception):
    pass


@dataclass
class AgentSession:
    host_id: str
    session_id: str
    peer: str
    context: grpc.aio.ServicerContext
    task: asyncio.Task | None
    modules: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> (digest, base)
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: dict[str, asyncio.Future] = field(default_factory=dict)
    dropped_samples: int = 0
    closed: bool = False

    async def send(self, message: "pb.ServerMessage") -> None:
        async with self.write_lock:
            await self.context.write(message)


class AgentRegistry:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.sessions: dict[str, AgentSession] = {}
        self.index_maps: dict[str, dict[int, int]] = {}
        self.piece_owner: dict[str, str] = {}  # digest -> session id of the stream sending it
        self.piece_started: dict[str, float] = {}
        self.complete: set[str] = set()
        self.cleanups: set[asyncio.Task] = set()  # disconnects being recorded

    def online(self, host_id: str) -> bool:
        return host_id in self.sessions

    async def close_all(self) -> None:
        for session in list(self.sessions.values()):
            await end_session(session, grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        if self.cleanups:
            await asyncio.wait(set(self.cleanups), timeout=5)

    async def inspect_function(self, host_id: str, module: str, digest: str, index: int, actor: str) -> list:
        """Ask the host's agent to decode a function; cache and return [[offset, length, hex, text], ...]."""
        session = self.sessions.get(host_id)
        if session is None or session.closed:
            raise HostOffline(host_id)
        command_id = str(uuid.uuid4())
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        session.pending[command_id] = future
        try:
            async with self.runtime.sessionmaker() as db:
                crud.audit(db, actor, "command_sent", host_id,
                           {"command_id": command_id, "kind": "inspect_function", "module": module, "index": index})
                await db.commit()
            self.runtime.metrics.commands_sent.labels("inspect_function").inc()
            try:
                await session.send(pb.ServerMessage(command=pb.Command(
                    id=command_id, inspect_function=pb.InspectFunction(module=module, function_index=index))))
            except Exception as exc:  # noqa: BLE001 - the stream went away under us
                raise HostOffline(host_id) from exc
            try:
                result: pb.CommandResult = await asyncio.wait_for(future, self.runtime.settings.command_timeout_s)
            except asyncio.TimeoutError:
                raise CommandTimeout(command_id)
        finally:
            session.pending.pop(command_id, None)
        if not result.ok:
            raise CommandFailed(result.error or "unknown error")
        if not result.HasField("disassembly"):
            raise CommandFailed("the result carried no disassembly")
        instructions = [[i.offset, i.length, i.bytes.hex(), i.text] for i in result.disassembly.instructions]
        async with self.runtime.engine.begin() as conn:
            await conn.execute(text("""
                INSERT INTO instruction_cache (digest, index, instructions) VALUES (:d, :i, CAST(:ins AS jsonb))
                ON CONFLICT (digest, index) DO NOTHING"""),
                {"d": digest, "i": index, "ins": orjson.dumps(instructions).decode()})
        return instructions

    async def function_ids(self, digest: str) -> dict[int, int] | None:
        if digest not in self.complete:
            return None
        mapping = self.index_maps.get(digest)
        if mapping is None:
            mapping = await catalog.index_map(self.runtime.engine, digest)
            self.index_maps[digest] = mapping
        return mapping


async def end_session(session: AgentSession, code: grpc.StatusCode, reason: str) -> None:
    """End another handler's stream: send the status to the agent now, then stop that handler.
    (Cancelling the handler alone does not end the RPC on the wire.)"""
    session.closed = True
    try:
        await session.context.abort(code, reason)
    except Exception:  # noqa: BLE001 - abort signals by raising, in our task
        pass
    if session.task is not None and session.task is not asyncio.current_task():
        session.task.cancel()


def _bearer(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return None


def _validate_hello(hello: "pb.Hello") -> str | None:
    if not hello.host_id or len(hello.host_id) > 256:
        return "Hello.host_id must be 1 to 256 characters"
    if not hello.hostname:
        return "Hello.hostname is empty"
    names = set()
    for m in hello.modules:
        if not m.name:
            return "a ModuleRef has no name"
        if m.name in names:
            return f"module {m.name!r} is listed twice"
        names.add(m.name)
        if not DIGEST_RE.match(m.digest):
            return f"module {m.name!r} has an invalid digest (want lower-case hex SHA-256)"
    return None


class AgentService(pb_grpc.AgentServiceServicer):
    def __init__(self, runtime: Runtime, registry: AgentRegistry) -> None:
        self.runtime = runtime
        self.registry = registry

    async def _audit(self, actor: str, action: str, target: str | None, detail: dict) -> None:
        async with self.runtime.sessionmaker() as db:
            crud.audit(db, actor, action, target, detail)
            await db.commit()

    async def _publish_host(self, host_id: str) -> None:
        async with self.runtime.sessionmaker() as db:
            host = await crud.get_host_public(db, host_id)
        if host is not None:
            self.runtime.hub.publish({"type": "host", "host": host})

    async def Connect(self, request_iterator, context: grpc.aio.ServicerContext):  # noqa: N802 - gRPC name
        peer = context.peer() or "unknown"
        if not agent_token_matches(_bearer(context), self.runtime.agent_token):
            log.warning("agent rejected: invalid agent token from %s", peer)
            await self._audit(f"agent@{peer}", "agent_auth_failed", None, {"peer": peer})
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid agent token")
        first = await context.read()
        if first is grpc.aio.EOF or first.WhichOneof("kind") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be Hello")
        hello = first.hello
        problem = _validate_hello(hello)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)

        session = AgentSession(host_id=hello.host_id, session_id=str(uuid.uuid4()), peer=peer, context=context,
                               task=asyncio.current_task(),
                               modules={m.name: (m.digest, m.base_address) for m in hello.modules})
        previous = self.registry.sessions.get(hello.host_id)
        self.registry.sessions[hello.host_id] = session
        if previous is not None:
            log.info("agent %s reconnected: replacing session %s", hello.host_id, previous.session_id)
            await end_session(previous, grpc.StatusCode.ABORTED, "replaced by a newer stream from the same host")
        try:
            missing = await self._register(hello, session)
            await session.send(pb.ServerMessage(welcome=pb.Welcome(session_id=session.session_id,
                                                                   missing_digests=missing)))
            log.info("agent connected: host %s (%s) session %s from %s, %d modules, %d catalog pieces missing",
                     hello.host_id, hello.hostname, session.session_id, peer, len(hello.modules), len(missing))
            await self._publish_host(hello.host_id)
            await self._serve(session, context)
        finally:
            # When the peer vanishes (agent killed, network cut) grpc.aio cancels this handler, and can
            # cancel it again while it cleans up: record the disconnect in a task of its own, so the
            # host is always marked offline.
            cleanup = asyncio.create_task(self._disconnect(session))
            self.registry.cleanups.add(cleanup)
            cleanup.add_done_callback(self.registry.cleanups.discard)
            await asyncio.shield(cleanup)

    async def _register(self, hello: "pb.Hello", session: AgentSession) -> list[str]:
        now = datetime.now(timezone.utc)
        l1i = ({"size_bytes": hello.l1i.size_bytes, "line_bytes": hello.l1i.line_bytes, "ways": hello.l1i.ways}
               if hello.HasField("l1i") else None)
        values = dict(hostname=hello.hostname, kernel_release=hello.kernel_release,
                      kernel_build_id=hello.kernel_build_id, cpu_model=hello.cpu_model, cpu_count=hello.cpu_count,
                      l1i=l1i, capabilities=[{"name": c.name, "available": c.available, "detail": c.detail}
                                             for c in hello.capabilities],
                      agent_version=hello.agent_version, metric_interval_ms=hello.metric_interval_ms or 1000,
                      sample_frequency_hz=hello.sample_frequency_hz, sample_event=hello.sample_event,
                      parse_seconds=hello.parse_seconds, online=True, last_seen=now, connected_at=now,
                      session_id=session.session_id)
        async with self.runtime.sessionmaker() as db:
            stmt = insert(Host).values(id=hello.host_id, **values)
            await db.execute(stmt.on_conflict_do_update(index_elements=[Host.id], set_=values))
            await db.execute(text("DELETE FROM host_modules WHERE host_id = :h"), {"h": hello.host_id})
            if hello.modules:
                await db.execute(insert(HostModule), [
                    {"host_id": hello.host_id, "name": m.name, "digest": m.digest, "base_address": m.base_address,
                     "function_count": m.function_count, "block_count": m.block_count, "position": i}
                    for i, m in enumerate(hello.modules)])
                await db.execute(text("""
                    INSERT INTO catalog_pieces (digest, module, function_count, block_count)
                    SELECT * FROM unnest(CAST(:d AS text[]), CAST(:m AS text[]), CAST(:f AS int[]), CAST(:b AS int[]))
                    ON CONFLICT (digest) DO NOTHING"""),
                    {"d": [m.digest for m in hello.modules], "m": [m.name for m in hello.modules],
                     "f": [m.function_count for m in hello.modules], "b": [m.block_count for m in hello.modules]})
            rows = await db.execute(text("SELECT digest, complete FROM catalog_pieces WHERE digest = ANY(:d)"),
                                    {"d": [m.digest for m in hello.modules]})
            complete = {r.digest for r in rows if r.complete}
            crud.audit(db, f"agent:{hello.host_id}", "agent_connected", hello.host_id,
                       {"session_id": session.session_id, "peer": session.peer, "hostname": hello.hostname,
                        "agent_version": hello.agent_version})
            await db.commit()
        self.registry.complete |= complete
        seen: set[str] = set()
        missing = []
        for m in hello.modules:
            if m.digest not in complete and m.digest not in seen:
                seen.add(m.digest)
                missing.append(m.digest)
        return missing

    async def _serve(self, session: AgentSession, context) -> None:
        while True:
            message = await context.read()
            if message is grpc.aio.EOF:
                return
            kind = message.WhichOneof("kind")
            if kind == "catalog_chunk":
                await self._on_chunk(session, message.catalog_chunk)
            elif kind == "metrics":
                await self._on_metrics(session, message.metrics)
            elif kind == "result":
                future = session.pending.get(message.result.command_id)
                if future is not None and not future.done():
                    future.set_result(message.result)
                else:
                    log.warning("host %s: result for unknown command %s", session.host_id, message.result.command_id)
            elif kind == "progress":
                pass  # inspect_function is quick; progress is not shown yet
            elif kind == "hello":
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "Hello may only be sent once per stream")
            else:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "empty AgentMessage")

    async def _on_chunk(self, session: AgentSession, chunk: "pb.CatalogChunk") -> None:
        registry = self.registry
        digest = chunk.digest
        if digest not in {d for d, _ in session.modules.values()}:
            await session.context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                        f"catalog chunk for digest {digest[:16]} that Hello did not announce")
        if digest in registry.complete:
            return
        owner = registry.piece_owner.get(digest)
        owner_live = owner is not None and any(s.session_id == owner for s in registry.sessions.values())
        if owner != session.session_id:
            if owner_live or chunk.seq != 0:
                return  # another stream is sending this piece, or we joined mid-piece
            registry.piece_owner[digest] = session.session_id
            registry.piece_started[digest] = time.perf_counter()
            await catalog.discard_partial(self.runtime.engine, digest)
        module = chunk.module
        base = session.modules.get(module, (digest, 0))[1]
        if module not in session.modules or session.modules[module][0] != digest:
            base = next(b for d, b in session.modules.values() if d == digest)
        stored_fns, _, _ = await catalog.store_chunk(self.runtime.engine, digest, base, chunk.functions)
        self.runtime.metrics.catalog_functions.inc(stored_fns)
        if chunk.last:
            stored = await catalog.mark_complete(self.runtime.engine, digest)
            registry.complete.add(digest)
            registry.piece_owner.pop(digest, None)
            seconds = time.perf_counter() - registry.piece_started.pop(digest, time.perf_counter())
            log.info("catalog stored: %s (%s) %d functions in %.2f s from host %s",
                     module, digest[:16], stored, seconds, session.host_id)
            async with self.runtime.sessionmaker() as db:
                hosts = (await db.execute(text("SELECT DISTINCT host_id FROM host_modules WHERE digest = :d"),
                                          {"d": digest})).scalars().all()
            for host_id in hosts:
                await self._publish_host(host_id)

    async def _on_metrics(self, session: AgentSession, batch: "pb.MetricBatch") -> None:
        ts = samples.interval_start(batch.interval_start_unix_ns)
        per_block: Counter = Counter()
        dropped = 0
        maps: dict[str, dict[int, int] | None] = {}
        for b in batch.blocks:
            ref = session.modules.get(b.module)
            if ref is None:
                dropped += b.count
                continue
            digest = ref[0]
            if digest not in maps:
                maps[digest] = await self.registry.function_ids(digest)
            mapping = maps[digest]
            fid = mapping.get(b.function_index) if mapping is not None else None
            if fid is None or b.count == 0:
                dropped += b.count
                continue
            per_block[(fid, b.block_offset)] += b.count
        if dropped:
            session.dropped_samples += dropped
        metrics = self.runtime.metrics
        metrics.ingest_batches.inc()
        metrics.ingest_samples.inc(batch.total_samples)
        metrics.ingest_dropped.inc(dropped)
        rows = [(fid, off, count) for (fid, off), count in per_block.items()]
        await samples.store_batch(self.runtime.engine, session.host_id, ts, batch.interval_ms, rows,
                                  (batch.total_samples, batch.user_samples, batch.unmapped_samples,
                                   batch.lost_samples, dropped))
        if self.runtime.hub.subscriber_count:
            per_fn: Counter = Counter()
            for (fid, _), count in per_block.items():
                per_fn[fid] += count
            top = per_fn.most_common(20)
            names = await samples.function_names(self.runtime.engine, [fid for fid, _ in top])
            self.runtime.hub.publish({"type": "samples", "host_id": session.host_id, "interval_start": ts,
                                      "total_samples": batch.total_samples,
                                      "top": [{"function_id": fid, "name": names.get(fid, ""), "samples": c}
                                              for fid, c in top]})

    async def _disconnect(self, session: AgentSession) -> None:
        session.closed = True
        for future in session.pending.values():
            if not future.done():
                future.set_exception(HostOffline(session.host_id))
        for digest, owner in list(self.registry.piece_owner.items()):
            if owner == session.session_id:
                self.registry.piece_owner.pop(digest, None)
        replaced = self.registry.sessions.get(session.host_id) is not session
        if not replaced:
            self.registry.sessions.pop(session.host_id, None)
        try:
            async with self.runtime.sessionmaker() as db:
                if not replaced:
                    await db.execute(text("UPDATE hosts SET online = false, last_seen = now() "
                                          "WHERE id = :h AND session_id = :s"),
                                     {"h": session.host_id, "s": session.session_id})
                crud.audit(db, f"agent:{session.host_id}", "agent_disconnected", session.host_id,
                           {"session_id": session.session_id, "replaced": replaced,
                            "dropped_samples": session.dropped_samples})
                await db.commit()
            log.info("agent disconnected: host %s session %s%s", session.host_id, session.session_id,
                     " (replaced by a newer stream)" if replaced else "")
            if not replaced:
                await self._publish_host(session.host_id)
        except Exception:  # noqa: BLE001 - shutting down; the database may already be gone
            log.exception("recording the disconnect of host %s failed", session.host_id)


def create_grpc_server(runtime: Runtime, bind: str) -> tuple[grpc.aio.Server, int]:
    """Build the agents' gRPC server on `bind` (host:port, port 0 picks one); returns (server, port)."""
    limit = runtime.settings.grpc_max_message_bytes
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                      ("grpc.max_send_message_length", limit),
                                      ("grpc.keepalive_permit_without_calls", 1),
                                      ("grpc.http2.min_ping_interval_without_data_ms", 10000)])
    pb_grpc.add_AgentServiceServicer_to_server(AgentService(runtime, runtime.agents), server)
    port = server.add_insecure_port(bind)
    if port == 0:
        raise RuntimeError(f"cannot listen for agents on {bind}")
    return server, port
