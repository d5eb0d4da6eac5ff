# SPDX-License-Identifier: Apache-2.0
"""AgentService: the server end of each agent's long-lived stream (Connect) and enrolment (Enroll).
The connected agents' sessions and their registry are app.domain.sessions.

Identity: Connect runs over mutual TLS; the client certificate's common name is the host id, and the
certificate must be the one issued to that host at its last enrolment (its fingerprint is stored on
the host), so a host id can only be used by its own credential and a retired or deleted host cannot
come back with an old certificate. Hello must name the same host.

One stream per host: a second stream of the same host replaces the first. Nothing an agent sends is
stored before it is checked (app.protocol.agent_input); a malformed message ends the stream with
INVALID_ARGUMENT and the reason, a database outage with UNAVAILABLE, anything else with INTERNAL and
a log line, never with the text of an SQL error.

Catalog pieces are content-addressed and stored once: an upload is staged, and stored under its digest
only when its chunks arrived in order, its function and block counts match Hello, the digest
recomputed from the content (app.protocol.catalog_digest) equals the announced one, and its named targets agree
with the functions they name (app.storage.catalog.TargetCheck: what the digest does not cover is not stored).
While one stream uploads a piece, others that have it wait; if the upload fails or its stream ends,
another connected host that has the piece is asked for it (CatalogRequest).

Data messages (MetricBatch, MeasurementBatch, DataGap) carry a sequence number per agent instance;
each is checked and mapped here, stored by the ingest writer in a group commit (app.storage.ingest),
stored at most once (delivery_marks) and acknowledged cumulatively once stored. A batch whose time lies
outside [now - retention, now + max skew] is refused (acknowledged, not stored), counted and recorded as
a gap; the host is flagged with a clock offset by Hello's clock at each connect, or by a run of
CLOCK_AHEAD_RUN batches in a row ahead of our clock (one refused batch alone flags nothing). A
measurement interval whose content is refused (app.protocol.agent_input, app.protocol.measured_edges) is
refused alone the same way, counted on its measurement (refused_intervals, refusal) and logged: the stream goes on, so a
bad batch that the agent would resend after every reconnect never keeps a host offline.

Targets and commands: Hello and TargetsUpdate say which targets the agent serves (the kernel, attached
processes) with their modules; the catalog pieces of a new target's modules are asked for with
CatalogRequest and verified like the kernel's. Commands are stored and routed by app.domain.commands; this
stream sends them, and hands their progress and results back. Hello also lists the agent's
measurements, which restores the backend's view after any reconnect.
"""
import asyncio
import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError, OperationalError

from app.core.pki import fingerprint_pem
from app.domain import enrolment
from app.domain.sessions import AgentRegistry, AgentSession, Upload, end_session
from app.protocol import agent_input, measured_edges
from app.protocol.agent_input import InvalidInput
from app.protocol.catalog_digest import PieceHasher
from app.protocol.proto import pb
from app.runtime import Runtime
from app.storage import audit_log, catalog, measurements, samples, stacks, targets
from app.storage import hosts as host_store
from app.storage.models import Host
from app.storage.series.layout import NSLOTS, SLOT

log = logging.getLogger("hotpath.agents")
SERVICE = "hotpath.v1.AgentService"


@dataclass
class Undecodable:
    """What the stream yields for bytes that do not parse as the message they should be."""

    reason: str


# Data batches in a row, each refused for lying ahead of our clock by more than the skew bound, that flag
# the host's clock as skewed between two Hellos (each Hello measures the clock itself).
CLOCK_AHEAD_RUN = 3


def _peer_address(peer: str) -> str:
    """'ipv4:127.0.0.1:5555' -> 'ipv4:127.0.0.1' (the address without the port)."""
    return peer.rsplit(":", 1)[0] if peer.count(":") >= 2 else peer


def _certificate(context: grpc.aio.ServicerContext) -> tuple[str | None, str | None]:
    """(common name, SHA-256 fingerprint) of the verified client certificate, if any."""
    auth = context.auth_context() or {}
    names = auth.get("x509_common_name") or []
    pems = auth.get("x509_pem_cert") or []
    name = names[0].decode(errors="replace") if names else None
    return name, (fingerprint_pem(pems[0]) if pems else None)


def _ns_to_dt(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC)


# MetricValue.metric -> its slot in the series (concurrency and per-call values are derived, not stored).
_METRIC_SLOT = {pb.METRIC_COUNT: SLOT["count"], pb.METRIC_WALL_NS: SLOT["wall_ns"],
                pb.METRIC_VTIME_NS: SLOT["vtime_ns"], pb.METRIC_CYCLES: SLOT["cycles"],
                pb.METRIC_INSTRUCTIONS: SLOT["instructions"], pb.METRIC_ICACHE_STALL: SLOT["icache_stall"],
                pb.METRIC_BRANCH_MISPREDICT: SLOT["branch_mispredict"]}


class AgentService:
    def __init__(self, runtime: Runtime, registry: AgentRegistry) -> None:
        self.runtime = runtime
        self.registry = registry

    async def _audit(self, actor: str, action: str, target: str | None, detail: dict) -> None:
        async with self.runtime.sessionmaker() as db:
            audit_log.record(db, actor, action, target, detail)
            await db.commit()

    async def _publish_host(self, host_id: str) -> None:
        async with self.runtime.sessionmaker() as db:
            host = await host_store.get_host_public(db, host_id)
        if host is not None:
            self.runtime.hub.publish("hosts", {"type": "host", "host": host})
            self.runtime.hub.publish(f"host:{host_id}", {"type": "host", "host": host})

    async def _reject(self, context, peer: str, code: grpc.StatusCode, reason: str, host_id: str | None) -> None:
        """End an unauthenticated stream; audit it, at most one record per peer address and minute."""
        address = _peer_address(peer)
        now = time.monotonic()
        start, count = self.registry.auth_failures.get(address, (now, 0))
        if now - start > 60:
            start, count = now, 0
        self.registry.auth_failures[address] = (start, count + 1)
        if count == 0:
            log.warning("agent rejected from %s: %s", peer, reason)
            try:
                await self._audit(f"agent@{address}", "agent_auth_failed", host_id, {"peer": peer, "reason": reason})
            except (DBAPIError, OSError):
                log.warning("could not audit a rejected agent: the database is unavailable")
        await context.abort(code, reason)

    # Enrolment ------------------------------------------------------------------------------------

    async def Enroll(self, request, context: grpc.aio.ServicerContext):  # noqa: N802 - gRPC name
        peer = context.peer() or "unknown"
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        try:
            issued = await enrolment.enroll(self.runtime.settings, self.runtime.sessionmaker, self.runtime.pki, request,
                                            peer)
        except enrolment.EnrolmentError as exc:
            await context.abort(exc.code, str(exc))
        except (DBAPIError, OSError):
            log.exception("enrolment failed")
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the backend cannot reach its database; try again")
        return pb.EnrollResponse(certificate_pem=issued.certificate_pem, ca_pem=self.runtime.pki.ca_pem.decode(),
                                 not_after_unix=int(issued.not_after.timestamp()))

    # The stream -----------------------------------------------------------------------------------

    async def Connect(self, request_iterator, context: grpc.aio.ServicerContext):  # noqa: N802 - gRPC name
        peer = context.peer() or "unknown"
        address = _peer_address(peer)
        if self.registry.peers[address] >= self.runtime.settings.agent_streams_per_peer:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many agent streams from this address")
        self.registry.peers[address] += 1
        try:
            await self._connect(context, peer)
        except grpc.aio.AbortError:
            raise
        except asyncio.CancelledError:
            raise
        except InvalidInput as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except (OperationalError, OSError, ConnectionError) as exc:
            log.warning("agent stream from %s ended: the database is unavailable (%s)", peer, type(exc).__name__)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the backend cannot reach its database; try again")
        except DBAPIError:
            log.exception("agent stream from %s: database error", peer)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error (logged on the server)")
        except Exception:
            log.exception("agent stream from %s failed", peer)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error (logged on the server)")
        finally:
            self.registry.peers[address] -= 1
            if self.registry.peers[address] <= 0:
                del self.registry.peers[address]

    async def _read(self, context, timeout: float | None = None):
        message = await (asyncio.wait_for(context.read(), timeout) if timeout else context.read())
        if isinstance(message, Undecodable):
            raise InvalidInput(message.reason)
        return message

    async def _connect(self, context: grpc.aio.ServicerContext, peer: str) -> None:
        settings = self.runtime.settings
        cert_host, cert_fp = _certificate(context)
        if cert_host is None or cert_fp is None:
            await self._reject(context, peer, grpc.StatusCode.UNAUTHENTICATED,
                               "no client certificate: enrol this agent first (hotpathd enroll)", None)
        async with self.runtime.sessionmaker() as db:
            host = await db.get(Host, cert_host)
        if host is None or host.cert_fingerprint != cert_fp:
            await self._reject(context, peer, grpc.StatusCode.UNAUTHENTICATED,
                               "this certificate is not the current credential of its host "
                               "(deleted, retired or enrolled again): enrol again", cert_host)
        assert host is not None
        if host.status == "retired":
            await self._reject(context, peer, grpc.StatusCode.PERMISSION_DENIED,
                               "this host is retired; an admin must delete it before it can enrol again", cert_host)
        try:
            first = await self._read(context, settings.hello_timeout_s)
        except TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no Hello within the time allowed")
        if first is grpc.aio.EOF or first.WhichOneof("kind") != "hello":
            raise InvalidInput("the first message must be Hello")
        hello = first.hello
        agent_input.check_hello(hello)
        if hello.host_id != cert_host:
            await self._reject(context, peer, grpc.StatusCode.PERMISSION_DENIED,
                               "Hello.host_id is not the host named by this agent's certificate", cert_host)
        received_ns = time.time_ns()

        build = hello.kernel_build_id or hello.kernel_release
        core_base = hello.modules[0].base_address if hello.modules else 0
        session = AgentSession(host_id=hello.host_id, session_id=str(uuid.uuid4()), peer=peer, context=context,
                               task=asyncio.current_task(), instance_id=hello.instance_id,
                               build=build, core_base=core_base,
                               kernel_digests=[m.digest for m in hello.modules],
                               refs={m.digest: m for m in hello.modules},
                               piece_keys={m.digest: (build, core_base) for m in hello.modules},
                               tokens=settings.agent_messages_per_s * 10)
        session.add_targets(t for t in hello.targets if t.state == pb.TARGET_STATE_ATTACHED)
        previous = self.registry.sessions.get(hello.host_id)
        self.registry.sessions[hello.host_id] = session
        if previous is not None:
            log.info("agent %s reconnected: replacing session %s", hello.host_id, previous.session_id)
            await end_session(previous, grpc.StatusCode.ABORTED, "replaced by a newer stream from the same host")
        try:
            missing, acks = await self._register(hello, session, received_ns)
            # Plans settled from the installs Hello lists before Welcome, so what the agent is told and
            # what the console shows after the connect agree (and before commands are resent).
            try:
                if hello.installs_listed:
                    await self.runtime.plans.on_hello(hello.host_id, hello.installs)
            except Exception:  # noqa: BLE001 - the periodic reconciliation settles them later
                log.exception("host %s: plans not reconciled from its Hello", hello.host_id)
            await session.send(pb.ServerMessage(welcome=pb.Welcome(
                session_id=session.session_id, missing_digests=missing,
                acks=[pb.Ack(instance_id=i, seq=s) for i, s in acks.items()])))
            session.welcomed = True
            log.info("agent connected: host %s (%s) session %s from %s, %d modules, %d target(s), "
                     "%d measurement(s), %d catalog pieces missing", hello.host_id, hello.hostname,
                     session.session_id, peer, len(hello.modules), len(hello.targets), len(hello.measurements),
                     len(missing))
            await self._publish_host(hello.host_id)
            self.runtime.hub.publish(f"host:{hello.host_id}", {"type": "targets", "host_id": hello.host_id})
            await self.runtime.commands.resend(session)
            await self._serve(session, context)
        finally:
            # When the peer vanishes (agent killed, network cut) grpc.aio cancels this handler, and can
            # cancel it again while it cleans up: record the disconnect in a task of its own, so the
            # host is always marked offline.
            cleanup = asyncio.create_task(self._disconnect(session))
            self.registry.cleanups.add(cleanup)
            cleanup.add_done_callback(self.registry.cleanups.discard)
            await asyncio.shield(cleanup)

    async def _register(self, hello: "pb.Hello", session: AgentSession,
                        received_ns: int) -> tuple[list[str], dict[str, int]]:
        now = datetime.now(UTC)
        l1i = ({"size_bytes": hello.l1i.size_bytes, "line_bytes": hello.l1i.line_bytes, "ways": hello.l1i.ways}
               if hello.HasField("l1i") else None)
        offset_ms = (hello.clock_unix_ns - received_ns) // 1_000_000 if hello.clock_unix_ns else None
        values = dict(hostname=hello.hostname, kernel_release=hello.kernel_release,
                      kernel_build_id=hello.kernel_build_id, cpu_model=hello.cpu_model, cpu_count=hello.cpu_count,
                      l1i=l1i, capabilities=[{"name": c.name, "available": c.available, "detail": c.detail}
                                             for c in hello.capabilities],
                      agent_version=hello.agent_version, metric_interval_ms=hello.metric_interval_ms or 1000,
                      sample_frequency_hz=hello.sample_frequency_hz, sample_event=hello.sample_event,
                      parse_seconds=hello.parse_seconds, online=True, last_seen=now, connected_at=now,
                      session_id=session.session_id, replica=self.runtime.replica_id,
                      clock_offset_ms=offset_ms, clock_checked_at=now if offset_ms is not None else None)
        # Writes of an earlier stream of this host still in the writer's queue go first, so the
        # delivery marks read below are final.
        await self.runtime.writer.drain()
        async with self.runtime.sessionmaker() as db:
            await db.execute(insert(Host).values(id=hello.host_id, **values).on_conflict_do_update(
                index_elements=[Host.id], set_=values))
            conn = await db.connection()
            reported = list(hello.targets) or [pb.Target(id="kernel", kind=pb.TARGET_KIND_KERNEL,
                                                         state=pb.TARGET_STATE_ATTACHED)]
            await targets.store(conn, hello.host_id, reported, complete_list=True, kernel_modules=hello.modules)
            for info in hello.measurements:
                await measurements.store_info(conn, hello.host_id, info)
                session.measurement_rows[info.measurement_id] = len(info.resources)
            ended = await measurements.end_unreported(conn, hello.host_id,
                                                      [m.measurement_id for m in hello.measurements])
            if ended:
                log.warning("host %s: %d measurement(s) the agent no longer runs marked failed", hello.host_id,
                            len(ended))
            rows = await db.execute(text("SELECT digest FROM catalog_pieces WHERE digest = ANY(:d) AND complete"),
                                    {"d": list(session.refs)})
            complete = {r.digest for r in rows}
            marks = await db.execute(text("""
                SELECT instance_id, seq FROM delivery_marks WHERE host_id = :h ORDER BY updated_at DESC LIMIT 32"""),
                {"h": hello.host_id})
            session.marks = {r.instance_id: r.seq for r in marks}
            audit_log.record(db, f"agent:{hello.host_id}", "agent_connected", hello.host_id,
                       {"session_id": session.session_id, "peer": session.peer, "hostname": hello.hostname,
                        "agent_version": hello.agent_version, "replica": self.runtime.replica_id,
                        "clock_offset_ms": offset_ms})
            await db.commit()
        if offset_ms is not None and abs(offset_ms) > self.runtime.settings.max_clock_skew_s * 1000:
            log.warning("host %s: its clock is %+.1f s off ours", hello.host_id, offset_ms / 1000)
        self.registry.complete |= complete
        missing = [d for d in session.refs if d not in complete]
        return missing, dict(session.marks)

    async def _throttle(self, session: AgentSession) -> None:
        """At most agent_messages_per_s data messages per second (bursts of ten seconds' worth): a
        stream above it is slowed down, and gRPC's flow control pushes back on the agent."""
        rate = self.runtime.settings.agent_messages_per_s
        now = time.monotonic()
        session.tokens = min(rate * 10, session.tokens + (now - session.refilled) * rate)
        session.refilled = now
        if session.tokens < 1:
            await asyncio.sleep((1 - session.tokens) / rate)
            session.tokens = 1
            session.refilled = time.monotonic()
        session.tokens -= 1

    async def _serve(self, session: AgentSession, context) -> None:
        while True:
            message = await self._read(context)
            if message is grpc.aio.EOF:
                return
            kind = message.WhichOneof("kind")
            if kind == "catalog_chunk":
                await self._on_chunk(session, message.catalog_chunk)
            elif kind in ("metrics", "gap", "measurement"):
                await self._throttle(session)
                await self._on_data(session, message, kind)
            elif kind == "result":
                await self.runtime.commands.on_result(session, message.result)
            elif kind == "progress":
                await self.runtime.commands.on_progress(session.host_id, message.progress)
            elif kind == "targets":
                await self._on_targets(session, message.targets)
            elif kind == "hello":
                raise InvalidInput("Hello may only be sent once per stream")
            else:
                raise InvalidInput("empty AgentMessage")

    async def _on_targets(self, session: AgentSession, update: "pb.TargetsUpdate") -> None:
        """The agent's targets changed: record them, and ask for the new modules' catalog pieces."""
        agent_input.check_targets(update.targets)
        async with self.runtime.engine.begin() as conn:
            await targets.store(conn, session.host_id, update.targets, complete_list=True)
        session.add_targets(t for t in update.targets if t.state == pb.TARGET_STATE_ATTACHED)
        await self.request_missing(session)
        self.runtime.hub.publish(f"host:{session.host_id}", {"type": "targets", "host_id": session.host_id})

    async def request_missing(self, session: AgentSession) -> None:
        """Ask this stream for the catalog pieces of its modules that nobody stored or is uploading."""
        registry = self.registry
        candidates = [d for d in session.refs if d not in registry.complete and d not in session.uploads]
        if not candidates:
            return
        async with self.runtime.engine.connect() as conn:
            stored = {r[0] for r in await conn.execute(text(
                "SELECT digest FROM catalog_pieces WHERE digest = ANY(:d) AND complete"), {"d": candidates})}
        registry.complete |= stored
        live = {s.session_id for s in registry.sessions.values()}
        wanted = [d for d in candidates if d not in stored and registry.piece_owner.get(d) not in live]
        if wanted:
            await session.send(pb.ServerMessage(catalog_request=pb.CatalogRequest(digests=wanted)))

    # Catalog pieces -------------------------------------------------------------------------------

    async def _on_chunk(self, session: AgentSession, chunk: "pb.CatalogChunk") -> None:
        registry = self.registry
        digest = chunk.digest
        ref = session.refs.get(digest)
        if ref is None:
            raise InvalidInput(f"catalog chunk for digest {agent_input.excerpt(digest, 16)} "
                               "that Hello did not announce")
        if chunk.module != ref.name:
            raise InvalidInput(f"catalog chunk for {digest[:16]} names module {agent_input.excerpt(chunk.module)}, "
                               f"Hello named {agent_input.excerpt(ref.name)}")
        upload = session.uploads.get(digest)
        if upload is None:
            if digest in registry.complete:
                return  # another host stored it meanwhile
            if chunk.seq != 0:
                owner = registry.piece_owner.get(digest)
                if owner is not None and owner != session.session_id:
                    return  # chunks of a piece this stream was told to leave to another one
                raise InvalidInput(f"catalog chunk {chunk.seq} of {digest[:16]} arrived before chunk 0")
            owner = registry.piece_owner.get(digest)
            if owner is not None and any(s.session_id == owner for s in registry.sessions.values()):
                return  # another stream is uploading this piece; we ask this one again if that fails
            registry.piece_owner[digest] = session.session_id
            build, outside_base = session.piece_keys.get(digest, (session.build, session.core_base))
            upload = Upload(digest=digest, module=ref.name, staging=f"{catalog.STAGING_PREFIX}{uuid.uuid4().hex}",
                            base=ref.base_address, function_count=ref.function_count, block_count=ref.block_count,
                            hasher=PieceHasher(build, ref.name, ref.function_count, outside_base),
                            targets=catalog.TargetCheck(ref.name))
            await catalog.begin_upload(self.runtime.engine, upload.staging, ref.name, ref.function_count,
                                       ref.block_count)
            session.uploads[digest] = upload
        try:
            if chunk.seq != upload.next_seq:
                raise InvalidInput(f"catalog chunk {chunk.seq} of {digest[:16]} where {upload.next_seq} was due")
            upload.next_seq += 1
            for f in chunk.functions:
                upload.blocks += agent_input.check_function(f, upload.functions)
                upload.functions += 1
            if upload.functions > upload.function_count or upload.blocks > upload.block_count:
                raise InvalidInput(f"catalog {digest[:16]} holds more functions or blocks than Hello announced "
                                   f"({upload.function_count} functions, {upload.block_count} blocks)")
            upload.hasher.add(chunk.functions)
            stored_fns, _, _ = await catalog.store_chunk(self.runtime.engine, upload.staging, upload.base,
                                                         chunk.functions, upload.targets)
            self.runtime.metrics.catalog_functions.inc(stored_fns)
            if chunk.last:
                await self._finish_upload(session, upload)
        except BaseException:
            session.uploads.pop(digest, None)
            await self._abandon_upload(session, upload, "failed")
            raise

    async def _finish_upload(self, session: AgentSession, upload: Upload) -> None:
        digest = upload.digest
        if upload.functions != upload.function_count or upload.blocks != upload.block_count:
            raise InvalidInput(f"catalog {digest[:16]} ended after {upload.functions} functions and "
                               f"{upload.blocks} blocks; Hello announced {upload.function_count} and "
                               f"{upload.block_count}")
        actual = upload.hasher.hexdigest()
        if actual != digest:
            await self._audit(f"agent:{session.host_id}", "catalog_rejected", session.host_id,
                              {"digest": digest, "recomputed": actual, "module": upload.module})
            raise InvalidInput(f"catalog {digest[:16]}: its content hashes to {actual[:16]}, not to its digest")
        wrong = await catalog.verify_targets(self.runtime.engine, upload.staging, upload.targets)
        if wrong is not None:
            await self._audit(f"agent:{session.host_id}", "catalog_rejected", session.host_id,
                              {"digest": digest, "module": upload.module, "reason": wrong[:512]})
            raise InvalidInput(f"catalog {digest[:16]}: {wrong}")
        session.uploads.pop(digest, None)
        stored = await catalog.promote_upload(self.runtime.engine, upload.staging, digest, upload.module,
                                              upload.function_count, upload.block_count)
        self.registry.complete.add(digest)
        self.registry.piece_owner.pop(digest, None)
        log.info("catalog %s: %s (%s) %d functions in %.2f s from host %s",
                 "stored" if stored else "already stored", upload.module, digest[:16], upload.functions,
                 time.perf_counter() - upload.started, session.host_id)
        async with self.runtime.sessionmaker() as db:
            hosts = (await db.execute(text("SELECT DISTINCT host_id FROM host_modules WHERE digest = :d"),
                                      {"d": digest})).scalars().all()
        for host_id in hosts:
            await self._publish_host(host_id)

    async def _abandon_upload(self, session: AgentSession, upload: Upload, why: str) -> None:
        """Discard an upload that failed or whose stream ended, and ask another host that has the piece."""
        if self.registry.piece_owner.get(upload.digest) == session.session_id:
            self.registry.piece_owner.pop(upload.digest, None)
        try:
            await asyncio.shield(catalog.discard_upload(self.runtime.engine, upload.staging))
        except (DBAPIError, OSError):
            log.warning("could not discard the staged catalog %s now; it is removed at the next start",
                        upload.staging)
        log.info("catalog %s (%s) from host %s %s after %d functions: discarded", upload.module,
                 upload.digest[:16], session.host_id, why, upload.functions)
        for other in list(self.registry.sessions.values()):
            if other is not session and other.welcomed and not other.closed and upload.digest in other.refs:
                try:
                    await other.send(pb.ServerMessage(catalog_request=pb.CatalogRequest(digests=[upload.digest])))
                    self.registry.piece_owner[upload.digest] = other.session_id
                    other.uploads.pop(upload.digest, None)
                    log.info("asked host %s for catalog %s", other.host_id, upload.digest[:16])
                    break
                except Exception:  # noqa: BLE001 - that stream is ending too; try the next one
                    continue

    # Data messages: metric batches and gaps ----------------------------------------------------

    async def _on_data(self, session: AgentSession, message: "pb.AgentMessage", kind: str) -> None:
        instance = message.instance_id or session.instance_id
        if instance and not agent_input.INSTANCE_RE.match(instance):
            raise InvalidInput("AgentMessage.instance_id must be 1 to 64 letters, digits, '-' or '_'")
        seq = message.seq
        if seq and not instance:
            raise InvalidInput("a numbered message needs an instance id (Hello.instance_id)")
        parsed_stacks = None
        if kind == "gap":
            if not seq:
                raise InvalidInput("a DataGap must carry a sequence number")
            agent_input.check_gap(message.gap, seq)
        elif kind == "metrics":
            agent_input.check_batch(message.metrics)
            parsed_stacks = (agent_input.check_stacks(message.metrics.stacks, message.metrics.total_samples)
                             if message.metrics.HasField("stacks") else None)
        mark = 0
        if seq:
            if instance not in session.marks:
                async with self.runtime.engine.connect() as conn:
                    found = (await conn.execute(text(
                        "SELECT seq FROM delivery_marks WHERE host_id = :h AND instance_id = :i"),
                        {"h": session.host_id, "i": instance})).scalar_one_or_none()
                session.marks[instance] = found or 0
            mark = session.marks[instance]
            if seq <= mark:
                await session.send(pb.ServerMessage(ack=pb.Ack(instance_id=instance, seq=mark)))
                return  # stored before: a resend after a reconnect
        gaps: list[dict] = []
        covered_from = message.gap.first_seq if kind == "gap" else seq
        if seq and covered_from > mark + 1:
            # Sequence numbers the agent neither sent nor reported as dropped.
            start = session.last_end.get(instance)
            end = _ns_to_dt(message.gap.start_unix_ns if kind == "gap" else
                            message.metrics.interval_start_unix_ns if kind == "metrics" else
                            message.measurement.interval_start_unix_ns)
            gaps.append(dict(start=min(start or end, end), end=end, instance=instance, first_seq=mark + 1,
                             messages=covered_from - mark - 1, source="backend",
                             reason=f"sequence numbers {mark + 1}..{covered_from - 1} never arrived"))
        item = samples.Item(host_id=session.host_id, mark=(instance, seq) if seq else None, gaps=gaps, guard=session)
        if kind == "gap":
            g = message.gap
            gaps.append(dict(start=_ns_to_dt(g.start_unix_ns), end=_ns_to_dt(max(g.end_unix_ns, g.start_unix_ns)),
                             instance=instance, first_seq=g.first_seq, messages=g.messages, source="agent",
                             reason=g.reason or "dropped by the agent"))
            for gap in gaps:
                gap["start"], gap["end"] = self._clamp(gap["start"]), self._clamp(gap["end"])
        elif kind == "metrics":
            await self._map_metrics(session, message.metrics, instance, seq, item, parsed_stacks)
        else:
            await self._map_measurement(session, message.measurement, instance, seq, item)
        if seq:
            session.marks[instance] = seq
        future = await self.runtime.writer.submit(item)
        future.add_done_callback(lambda f: self._stored(session, item, instance, seq, f))

    def _stored(self, session: AgentSession, item: "samples.Item", instance: str, seq: int,
                future: asyncio.Future) -> None:
        """A data message was stored (or not): acknowledge it, publish what views want to see."""
        if future.cancelled() or future.exception() is not None:
            session.store_failed = True  # nothing after it may be acknowledged
            session.known_stacks.clear()  # definitions it carried may not be stored
            if not session.ending:
                session.ending = True
                exc = None if future.cancelled() else future.exception()
                log.warning("host %s: a data message could not be stored (%s); ending the stream", session.host_id,
                            type(exc).__name__ if exc else "cancelled")
                task = asyncio.get_running_loop().create_task(end_session(
                    session, grpc.StatusCode.UNAVAILABLE, "the backend cannot reach its database; try again"))
                self.registry.cleanups.add(task)
                task.add_done_callback(self.registry.cleanups.discard)
            return
        if session.store_failed or session.closed:
            return
        task = asyncio.get_running_loop().create_task(self._after_store(session, item, instance, seq))
        self.registry.cleanups.add(task)
        task.add_done_callback(self.registry.cleanups.discard)

    async def _after_store(self, session: AgentSession, item: "samples.Item", instance: str, seq: int) -> None:
        try:
            if seq:
                await session.send(pb.ServerMessage(ack=pb.Ack(instance_id=instance, seq=seq)))
        except Exception:  # noqa: BLE001, S110 - the stream ended: the agent resends, stored once
            return
        hub = self.runtime.hub
        topic = f"host:{session.host_id}"
        if item.samples is not None and hub.wants(topic):
            s = item.samples
            per_fn: Counter = Counter()
            for fid, count in zip(s.function_ids, s.counts, strict=True):
                per_fn[fid] += count
            top = per_fn.most_common(20)
            names = await self.registry.names([fid for fid, _ in top])
            hub.publish(topic, {"type": "samples", "host_id": session.host_id, "interval_start": s.ts,
                                "total_samples": s.totals[0],
                                "top": [{"function_id": fid, "name": names.get(fid, ""), "samples": c}
                                        for fid, c in top]})
        if item.points is not None:
            m = item.measurement
            assert m is not None
            hub.publish(f"measurement:{item.points.measurement_id}", {
                "type": "measurement", "measurement_id": item.points.measurement_id, "host_id": session.host_id,
                "interval_start": item.points.ts, "state": m.state})
            if m.ended:
                hub.publish(topic, {"type": "targets", "host_id": session.host_id})
        if item.gaps:
            hub.publish(topic, {"type": "gap", "host_id": session.host_id})

    def _clamp(self, ts: datetime) -> datetime:
        """Keep a reported time within the window we accept data for (a gap's time is the agent's)."""
        now = datetime.now(UTC)
        low = now - timedelta(hours=self.runtime.settings.sample_retention_hours)
        high = now + timedelta(seconds=self.runtime.settings.max_clock_skew_s)
        return min(max(ts, low), high)

    async def _check_stack_frames(self, session: AgentSession, parsed: "stacks.BatchStacks") -> None:
        """Kernel frames must name functions of catalog pieces this host runs (or a stored piece), within
        the function's bytes when the piece is stored."""
        counts: dict[str, int] = {}
        for _, modules, flat in parsed.defs:
            for k in range(0, len(flat), 3):
                kind, digest, _ = modules[flat[k]]
                if kind != stacks.KERNEL_FUNCTION:
                    continue
                if digest not in counts:
                    ref = session.refs.get(digest)
                    if ref is not None:
                        counts[digest] = ref.function_count
                    else:
                        async with self.runtime.engine.connect() as conn:
                            found = (await conn.execute(text(
                                "SELECT function_count FROM catalog_pieces WHERE digest = :d AND complete"),
                                {"d": digest})).scalar_one_or_none()
                        if found is None:
                            raise InvalidInput(f"a stack frame names catalog {digest[:16]}, which this host does "
                                               "not run and no host has sent")
                        counts[digest] = found
                fn, off = flat[k + 1], flat[k + 2]
                if fn >= counts[digest]:
                    raise InvalidInput(f"a stack frame names function {fn} of catalog {digest[:16]}, which has "
                                       f"{counts[digest]}")
                mapping = await self.registry.function_ids(digest)
                entry = mapping.get(fn) if mapping is not None else None
                if entry is not None and off > entry[1]:
                    raise InvalidInput(f"a stack frame at offset {off:#x} of function {fn}, which is "
                                       f"{entry[1]:#x} bytes long")

    def _refuse_if_out_of_time(self, session: AgentSession, start_ns: int, end_ns: int, instance: str, seq: int,
                               item: "samples.Item") -> bool:
        """Refuse (record a gap, flag the clock) a batch outside [now - retention, now + skew]."""
        settings = self.runtime.settings
        now_ns = time.time_ns()
        skew_ns = int(settings.max_clock_skew_s * 1e9)
        oldest_ns = now_ns - int(settings.sample_retention_hours * 3600e9)
        if not (end_ns > now_ns + skew_ns or start_ns < oldest_ns):
            session.ahead_run = 0
            return False
        ahead = end_ns > now_ns + skew_ns
        offset_ms = (end_ns - now_ns) // 1_000_000
        reason = (f"refused: the host's clock is about {offset_ms / 1000:+.0f} s ahead of the backend's"
                  if ahead else "refused: the interval is older than the sample retention "
                  f"({settings.sample_retention_hours:g} h) by the backend's clock")
        at = self._clamp(_ns_to_dt(max(min(start_ns, now_ns + skew_ns), oldest_ns)))
        item.gaps.append(dict(start=at, end=at, instance=instance, first_seq=seq, messages=1, source="backend",
                              reason=reason))
        item.refused = True
        # One batch says little about the clock: an old one may be spooled data resent after an outage, a
        # future one a bad stamp among good ones. The clock is measured from Hello at each connect; a
        # batch flags the host only as the CLOCK_AHEAD_RUN-th in a row lying ahead of our clock.
        session.ahead_run = session.ahead_run + 1 if ahead else 0
        item.clock_offset_ms = offset_ms if session.ahead_run >= CLOCK_AHEAD_RUN else None
        log.warning("host %s: %s (batch %s)", session.host_id, reason, seq)
        if item.clock_offset_ms is not None:
            task = asyncio.get_running_loop().create_task(self._publish_host(session.host_id))
            self.registry.cleanups.add(task)
            task.add_done_callback(self.registry.cleanups.discard)
        return True

    async def _map_metrics(self, session: AgentSession, batch: "pb.MetricBatch", instance: str, seq: int,
                           item: "samples.Item", parsed_stacks: "stacks.BatchStacks | None" = None) -> None:
        """Check a metric batch against what Hello announced and map it to function ids."""
        start_ns = batch.interval_start_unix_ns
        end_ns = start_ns + batch.interval_ms * 1_000_000
        if self._refuse_if_out_of_time(session, start_ns, end_ns, instance, seq, item):
            return
        digests = session.kernel_digests
        maps: list[dict[int, tuple[int, int]] | None] = []
        idle_sets: list[set[int]] = []
        for digest in digests:
            maps.append(await self.registry.function_ids(digest))
            idle_sets.append(self.registry.idle_ids.get(digest, set()))
        counts_of = [session.refs[d].function_count for d in digests]
        # Block entries in arrival order; a key seen again (another entry of the same block and context)
        # adds to its position, and then its instruction counts are merged (rare: agents send one each).
        position: dict[tuple[int, int, bool], int] = {}
        function_ids: list[int] = []
        block_offsets: list[int] = []
        counts: list[int] = []
        idles: list[bool] = []
        insns: list[tuple[int, Any, Any]] = []  # (position, offsets, counts)
        merged = False
        dropped = 0
        nmods = len(digests)
        by_context = batch.idle_by_context
        for b in batch.blocks:
            mi = b.module_index
            if mi >= nmods:
                raise InvalidInput(f"samples for module {mi}, which Hello did not list ({nmods} modules)")
            fi = b.function_index
            if fi >= counts_of[mi]:
                raise InvalidInput(f"samples for function {fi} of module {mi}, which has {counts_of[mi]}")
            mapping = maps[mi]
            entry = mapping.get(fi) if mapping is not None else None
            if entry is None:
                dropped += b.count  # the piece is not stored yet
                continue
            off = b.block_offset
            size = entry[1]
            if off >= max(size, 1):
                raise InvalidInput(f"samples for block offset {off:#x} of function {fi}, "
                                   f"which is {size:#x} bytes long")
            # An agent that does not report context: the idle loop by name.
            idle = b.idle if by_context else fi in idle_sets[mi]
            key = (entry[0], off, idle)
            pos = position.get(key)
            if pos is None:
                pos = position[key] = len(counts)
                function_ids.append(entry[0])
                block_offsets.append(off)
                counts.append(b.count)
                idles.append(idle)
            else:
                counts[pos] += b.count
                merged = True
            ioffs = b.instruction_offsets
            if ioffs:
                if off + ioffs[-1] >= size:
                    raise InvalidInput(f"instruction samples past the end of function {fi}")
                insns.append((pos, ioffs, b.instruction_counts))
        stack_samples = stack_dropped = 0
        if parsed_stacks is not None:
            await self._check_stack_frames(session, parsed_stacks)
            stack_samples, stack_dropped = batch.stacks.stack_samples, batch.stacks.dropped_samples
            defined = {d[0] for d in parsed_stacks.defs}
            unknown = [r[0] for r in parsed_stacks.rows
                       if r[0] not in defined and r[0] not in session.known_stacks]
            if unknown:
                async with self.runtime.engine.connect() as conn:
                    found = await stacks.known_ids(conn, session.host_id, unknown)
                session.known_stacks |= found
                missing = set(unknown) - found
                if missing:
                    # Stacks whose definition this host never sent (or the backend forgot): counted, not stored.
                    lost = sum(r[1] for r in parsed_stacks.rows if r[0] in missing)
                    parsed_stacks.rows = [r for r in parsed_stacks.rows if r[0] not in missing]
                    stack_samples -= lost
                    stack_dropped += lost
                    log.warning("host %s: %d samples of %d undefined stack(s) not stored", session.host_id, lost,
                                len(missing))
        session.dropped_samples += dropped
        metrics = self.runtime.metrics
        metrics.ingest_batches.inc()
        metrics.ingest_samples.inc(batch.total_samples)
        metrics.ingest_dropped.inc(dropped)
        metrics.ingest_points.inc(len(counts))
        insn_index: list[int] = []
        insn_offsets: list[int] = []
        insn_counts: list[int] = []
        if merged and insns:
            per_pc: dict[int, Counter] = {}
            for pos, ioffs, icounts in insns:
                c = per_pc.setdefault(pos, Counter())
                for o, n in zip(ioffs, icounts, strict=True):
                    c[o] += n
            insns = [(pos, sorted(c), [c[o] for o in sorted(c)]) for pos, c in sorted(per_pc.items())]
        for pos, ioffs, icounts in insns:  # positions are 1-based in the stored arrays
            insn_index.extend([pos + 1] * len(ioffs))
            insn_offsets.extend(ioffs)
            insn_counts.extend(icounts)
        idle_samples = batch.idle_samples if by_context else sum(c for c, i in zip(counts, idles, strict=True) if i)
        item.samples = samples.SampleRow(
            host_id=session.host_id, ts=_ns_to_dt(start_ns), interval_ms=batch.interval_ms,
            totals=(batch.total_samples, batch.user_samples, batch.unmapped_samples, batch.lost_samples, dropped,
                    idle_samples),
            idle_by_context=batch.idle_by_context, stack_samples=stack_samples, stack_dropped=stack_dropped,
            function_ids=function_ids, block_offsets=block_offsets, counts=counts, idles=idles,
            insn_index=insn_index, insn_offsets=insn_offsets, insn_counts=insn_counts)
        if parsed_stacks is not None and (parsed_stacks.defs or parsed_stacks.rows):
            item.stacks = parsed_stacks
            # Known from now on: items are stored in order, and when one fails the stream ends and
            # forgets what it knew (see _stored), so a later batch may refer to these definitions.
            if len(session.known_stacks) > 500_000:
                session.known_stacks.clear()
            session.known_stacks |= {d[0] for d in parsed_stacks.defs}
        session.last_end[instance] = _ns_to_dt(end_ns)

    async def _map_measurement(self, session: AgentSession, batch: "pb.MeasurementBatch", instance: str, seq: int,
                               item: "samples.Item") -> None:
        """Check a measurement batch against its measurement's rows and turn it into one points row."""
        mid = batch.measurement_id
        if not agent_input.MEASUREMENT_ID_RE.match(mid):
            raise InvalidInput("MeasurementBatch.measurement_id must be 1 to 64 letters, digits, '-' or '_'")
        rows = session.measurement_rows.get(mid)
        if rows is None:
            async with self.runtime.engine.connect() as conn:
                rows = await measurements.rows_of(conn, session.host_id, mid)
            if rows is not None:
                session.measurement_rows[mid] = rows
        if rows is None:
            at = self._clamp(_ns_to_dt(batch.interval_start_unix_ns))
            item.gaps.append(dict(start=at, end=at, instance=instance, first_seq=seq, messages=1, source="backend",
                                  reason=f"refused: values of measurement {mid[:64]}, which this host does not run"))
            return
        edges: tuple = ((), (), (), (), (), ())
        try:
            agent_input.check_measurement_batch(batch, rows)
            if batch.edges:
                shapes = session.measurement_shapes.get(mid)
                if shapes is None:
                    async with self.runtime.engine.connect() as conn:
                        shapes = await measured_edges.load_shapes(conn, mid)
                    session.measurement_shapes[mid] = shapes
                edges = measured_edges.check_edges(batch, shapes)
        except InvalidInput as exc:
            # Refuse this interval alone: ending the stream would leave the batch unacknowledged, the
            # agent would resend it on every reconnect and the host would stay offline.
            why = str(exc)
            log.warning("host %s: refused an interval of measurement %s (seq %d): %s", session.host_id, mid, seq, why)
            at = self._clamp(_ns_to_dt(batch.interval_start_unix_ns))
            item.gaps.append(dict(start=at, end=at, instance=instance, first_seq=seq, messages=1, source="backend",
                                  reason=f"refused: {why}"))
            item.refused_interval = (mid, why)
            self.runtime.metrics.ingest_refused_intervals.inc()
            return
        start_ns, end_ns = batch.interval_start_unix_ns, batch.interval_end_unix_ns
        if self._refuse_if_out_of_time(session, start_ns, end_ns, instance, seq, item):
            return
        resources: list[int] = []
        vals: list[float | None] = []
        for rv in batch.resources:
            slot: list[float | None] = [None] * NSLOTS
            for v in rv.values:
                k = _METRIC_SLOT.get(v.metric)
                if k is not None:
                    slot[k] = v.value
            slot[SLOT["exits"]] = float(rv.exits) if rv.exits else None
            slot[SLOT["samples"]] = float(rv.samples) if rv.samples else None
            resources.append(rv.resource)
            vals.extend(slot)
        ts = _ns_to_dt(start_ns)
        state = agent_input.MEASUREMENT_STATES[batch.state]
        item.points = samples.PointRow(host_id=session.host_id, measurement_id=mid, ts=ts,
                                       seconds=(end_ns - start_ns) / 1e9, state=batch.state, resources=resources,
                                       vals=vals, edges=edges)
        item.measurement = samples.MeasurementUpdate(measurement_id=mid, state=state, detail=batch.detail,
                                                     last_ts=ts, ended=state in measurements.ENDED)
        self.runtime.metrics.ingest_points.inc(len(vals))
        session.last_end[instance] = _ns_to_dt(end_ns)

    async def _disconnect(self, session: AgentSession) -> None:
        session.closed = True
        for upload in list(session.uploads.values()):
            await self._abandon_upload(session, upload, "stream ended")
        session.uploads.clear()
        replaced = self.registry.sessions.get(session.host_id) is not session
        if not replaced:
            self.registry.sessions.pop(session.host_id, None)
        try:
            async with self.runtime.sessionmaker() as db:
                if not replaced:
                    await db.execute(text("UPDATE hosts SET online = false, last_seen = now() "
                                          "WHERE id = :h AND session_id = :s"),
                                     {"h": session.host_id, "s": session.session_id})
                audit_log.record(db, f"agent:{session.host_id}", "agent_disconnected", session.host_id,
                           {"session_id": session.session_id, "replaced": replaced,
                            "dropped_samples": session.dropped_samples})
                await db.commit()
            log.info("agent disconnected: host %s session %s%s", session.host_id, session.session_id,
                     " (replaced by a newer stream)" if replaced else "")
            if not replaced:
                await self._publish_host(session.host_id)
        except Exception:  # noqa: BLE001 - shutting down, or the database is gone; presence resets at start
            log.warning("recording the disconnect of host %s failed", session.host_id)


def _decoder(message_type):
    def decode(data: bytes):
        try:
            return message_type.FromString(data)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the sender's malformed message
            return Undecodable(f"the {message_type.DESCRIPTOR.name} does not decode: {str(exc)[:120]}")
    return decode


def _handlers(service: AgentService) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(SERVICE, {
        "Connect": grpc.stream_stream_rpc_method_handler(
            service.Connect, request_deserializer=_decoder(pb.AgentMessage),
            response_serializer=pb.ServerMessage.SerializeToString),
        "Enroll": grpc.unary_unary_rpc_method_handler(
            service.Enroll, request_deserializer=_decoder(pb.EnrollRequest),
            response_serializer=pb.EnrollResponse.SerializeToString),
    })


def create_grpc_server(runtime: Runtime, bind: str, enroll_bind: str) -> tuple[grpc.aio.Server, int, int]:
    """Build the agents' gRPC server: Connect over mutual TLS on `bind`, enrolment over server-only TLS
    on `enroll_bind` (host:port, port 0 picks one); returns (server, agent port, enrolment port)."""
    settings = runtime.settings
    limit = settings.grpc_max_message_bytes
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                      ("grpc.max_send_message_length", limit),
                                      ("grpc.max_concurrent_streams", 4),
                                      ("grpc.max_metadata_size", 16 * 1024),
                                      ("grpc.keepalive_time_ms", 30000),
                                      ("grpc.keepalive_timeout_ms", 10000),
                                      ("grpc.keepalive_permit_without_calls", 1),
                                      ("grpc.http2.min_ping_interval_without_data_ms", 10000)])
    server.add_generic_rpc_handlers((_handlers(AgentService(runtime, runtime.agents)),))
    pki = runtime.pki
    pair = [(pki.server_key_pem, pki.server_cert_pem)]
    port = server.add_secure_port(bind, grpc.ssl_server_credentials(pair, root_certificates=pki.ca_pem,
                                                                    require_client_auth=True))
    if port == 0:
        raise RuntimeError(f"cannot listen for agents on {bind}")
    enroll_port = server.add_secure_port(enroll_bind, grpc.ssl_server_credentials(pair))
    if enroll_port == 0:
        raise RuntimeError(f"cannot listen for agent enrolment on {enroll_bind}")
    return server, port, enroll_port
