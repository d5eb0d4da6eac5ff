# SPDX-License-Identifier: Apache-2.0
"""AgentService: the server end of each agent's long-lived stream (Connect) and enrolment (Enroll),
in parts by job: this module (identity, Hello, the stream's loop and end, the gRPC server), catalog
staging (app.agents.catalog_staging), data mapping (app.agents.data), clock checks (app.agents.clock),
throttling (app.agents.throttle), what they share (app.agents.base). The connected agents' sessions and
their registry are app.domain.sessions.

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
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf.message import Message
from sqlalchemy import case, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError, OperationalError

from app.agents.catalog_staging import CatalogStaging
from app.agents.data import DataMapping
from app.agents.throttle import Throttling, peer_address
from app.core.pki import fingerprint_pem
from app.domain import enrolment
from app.domain.sessions import AgentSession, end_session
from app.protocol import agent_input
from app.protocol.agent_input import InvalidInput
from app.protocol.proto import pb
from app.runtime import Runtime
from app.storage import audit_log, delivery_marks, measurements, nodes, targets
from app.storage.models import Host

log = logging.getLogger("hotpath.agents")
SERVICE = "hotpath.v1.AgentService"


@dataclass
class Undecodable:
    """What the stream yields for bytes that do not parse as the message they should be."""

    reason: str


def _certificate(context: grpc.aio.ServicerContext) -> tuple[str | None, str | None]:
    """(common name, SHA-256 fingerprint) of the verified client certificate, if any."""
    auth = context.auth_context() or {}
    names = auth.get("x509_common_name") or []
    pems = auth.get("x509_pem_cert") or []
    name = names[0].decode(errors="replace") if names else None
    return name, (fingerprint_pem(pems[0]) if pems else None)


class AgentService(CatalogStaging, DataMapping, Throttling):
    """The AgentService: Enroll, and Connect from Hello to the stream's end."""

    # Enrolment ------------------------------------------------------------------------------------

    async def Enroll(  # noqa: N802 - gRPC name
        self,
        request: "pb.EnrollRequest | Undecodable",
        context: grpc.aio.ServicerContext,
    ) -> "pb.EnrollResponse":
        peer = context.peer() or "unknown"
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        try:
            issued = await enrolment.enroll(
                self.runtime.settings, self.runtime.sessionmaker, self.runtime.pki, request, peer
            )
        except enrolment.EnrolmentError as exc:
            await context.abort(exc.code, str(exc))
        except (DBAPIError, OSError):
            log.exception("enrolment failed")
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the backend cannot reach its database; try again")
        return pb.EnrollResponse(
            certificate_pem=issued.certificate_pem,
            ca_pem=self.runtime.pki.ca_pem.decode(),
            not_after_unix=int(issued.not_after.timestamp()),
        )

    # The stream -----------------------------------------------------------------------------------

    async def Connect(  # noqa: N802 - gRPC name
        self,
        request_iterator: AsyncIterator["pb.AgentMessage | Undecodable"],
        context: grpc.aio.ServicerContext,
    ) -> None:
        peer = context.peer() or "unknown"
        address = peer_address(peer)
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
        except nodes.NodeUnavailable as exc:
            where = ", ".join(exc.labels)
            log.warning("agent stream from %s ended: its host's database node does not answer (%s)", peer, where)
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"the host's database node does not answer ({where}); try again"
            )
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

    async def _read(
        self, context: grpc.aio.ServicerContext, timeout: float | None = None
    ) -> Any:  # an AgentMessage or grpc.aio.EOF
        message = await (asyncio.wait_for(context.read(), timeout) if timeout else context.read())
        if isinstance(message, Undecodable):
            raise InvalidInput(message.reason)
        return message

    async def _connect(self, context: grpc.aio.ServicerContext, peer: str) -> None:
        settings = self.runtime.settings
        cert_host, cert_fp = _certificate(context)
        if cert_host is None or cert_fp is None:
            await self._reject(
                context,
                peer,
                grpc.StatusCode.UNAUTHENTICATED,
                "no client certificate: enrol this agent first (hotpathd enroll)",
                None,
            )
        async with self.runtime.sessionmaker() as db:
            host = await db.get(Host, cert_host)
        if host is None or host.cert_fingerprint != cert_fp:
            await self._reject(
                context,
                peer,
                grpc.StatusCode.UNAUTHENTICATED,
                "this certificate is not the current credential of its host "
                "(deleted, retired or enrolled again): enrol again",
                cert_host,
            )
        assert host is not None
        if host.status == "retired":
            await self._reject(
                context,
                peer,
                grpc.StatusCode.PERMISSION_DENIED,
                "this host is retired; an admin must delete it before it can enrol again",
                cert_host,
            )
        try:
            first = await self._read(context, settings.hello_timeout_s)
        except TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no Hello within the time allowed")
        if first is grpc.aio.EOF or first.WhichOneof("kind") != "hello":
            raise InvalidInput("the first message must be Hello")
        hello = first.hello
        agent_input.check_hello(hello)
        if hello.host_id != cert_host:
            await self._reject(
                context,
                peer,
                grpc.StatusCode.PERMISSION_DENIED,
                "Hello.host_id is not the host named by this agent's certificate",
                cert_host,
            )
        received_ns = time.time_ns()

        build = hello.kernel_build_id or hello.kernel_release
        core_base = hello.modules[0].base_address if hello.modules else 0
        session = AgentSession(
            host_id=hello.host_id,
            session_id=str(uuid.uuid4()),
            peer=peer,
            context=context,
            task=asyncio.current_task(),
            instance_id=hello.instance_id,
            build=build,
            core_base=core_base,
            kernel_digests=[m.digest for m in hello.modules],
            refs={m.digest: m for m in hello.modules},
            piece_keys={m.digest: (build, core_base) for m in hello.modules},
            tokens=settings.agent_messages_per_s * 10,
        )
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
            await session.send(
                pb.ServerMessage(
                    welcome=pb.Welcome(
                        session_id=session.session_id,
                        missing_digests=missing,
                        acks=[pb.Ack(instance_id=i, seq=s) for i, s in acks.items()],
                    )
                )
            )
            session.welcomed = True
            log.info(
                "agent connected: host %s (%s) session %s from %s, %d modules, %d target(s), "
                "%d measurement(s), %d catalog pieces missing",
                hello.host_id,
                hello.hostname,
                session.session_id,
                peer,
                len(hello.modules),
                len(hello.targets),
                len(hello.measurements),
                len(missing),
            )
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

    async def _register(
        self, hello: "pb.Hello", session: AgentSession, received_ns: int
    ) -> tuple[list[str], dict[str, int]]:
        now = datetime.now(UTC)
        l1i = (
            {"size_bytes": hello.l1i.size_bytes, "line_bytes": hello.l1i.line_bytes, "ways": hello.l1i.ways}
            if hello.HasField("l1i")
            else None
        )
        offset_ms = (hello.clock_unix_ns - received_ns) // 1_000_000 if hello.clock_unix_ns else None
        values = dict(
            hostname=hello.hostname,
            kernel_release=hello.kernel_release,
            kernel_build_id=hello.kernel_build_id,
            cpu_model=hello.cpu_model,
            cpu_count=hello.cpu_count,
            l1i=l1i,
            capabilities=[{"name": c.name, "available": c.available, "detail": c.detail} for c in hello.capabilities],
            agent_version=hello.agent_version,
            metric_interval_ms=hello.metric_interval_ms or 1000,
            sample_frequency_hz=hello.sample_frequency_hz,
            sample_event=hello.sample_event,
            parse_seconds=hello.parse_seconds,
            online=True,
            last_seen=now,
            connected_at=now,
            session_id=session.session_id,
            replica=self.runtime.replica_id,
            clock_offset_ms=offset_ms,
            clock_checked_at=now if offset_ms is not None else None,
            agent_labels={lb.key: lb.value for lb in hello.labels},
        )
        # Writes of an earlier stream of this host still in the writer's queue go first, so the
        # delivery marks read below are final.
        await self.runtime.writer.drain()
        # Read on the host's own database, bounded: a database node that hangs fails this Hello (UNAVAILABLE,
        # the agent tries again) rather than holding it and a connection of the coordinator's pool.
        session.marks = await delivery_marks.recent(self.runtime.engine, hello.host_id)
        async with self.runtime.sessionmaker() as db:
            # The fleet's labels follow the agent's until an admin edits them (migration 0014).
            upsert = insert(Host).values(id=hello.host_id, labels=values["agent_labels"], **values)
            await db.execute(
                upsert.on_conflict_do_update(
                    index_elements=[Host.id],
                    set_={
                        **values,
                        "labels": case(
                            (Host.labels_edited_at.is_(None), upsert.excluded.agent_labels), else_=Host.labels
                        ),
                    },
                )
            )
            conn = await db.connection()
            reported = list(hello.targets) or [
                pb.Target(id="kernel", kind=pb.TARGET_KIND_KERNEL, state=pb.TARGET_STATE_ATTACHED)
            ]
            await targets.store(conn, hello.host_id, reported, complete_list=True, kernel_modules=hello.modules)
            for info in hello.measurements:
                await measurements.store_info(conn, hello.host_id, info)
                session.measurement_rows[info.measurement_id] = len(info.resources)
            ended = await measurements.end_unreported(
                conn, hello.host_id, [m.measurement_id for m in hello.measurements]
            )
            if ended:
                log.warning(
                    "host %s: %d measurement(s) the agent no longer runs marked failed", hello.host_id, len(ended)
                )
            rows = await db.execute(
                text("SELECT digest FROM catalog_pieces WHERE digest = ANY(:d) AND complete"), {"d": list(session.refs)}
            )
            complete = {r.digest for r in rows}
            audit_log.record(
                db,
                f"agent:{hello.host_id}",
                "agent_connected",
                hello.host_id,
                {
                    "session_id": session.session_id,
                    "peer": session.peer,
                    "hostname": hello.hostname,
                    "agent_version": hello.agent_version,
                    "replica": self.runtime.replica_id,
                    "clock_offset_ms": offset_ms,
                },
            )
            await db.commit()
        if offset_ms is not None and abs(offset_ms) > self.runtime.settings.max_clock_skew_s * 1000:
            log.warning("host %s: its clock is %+.1f s off ours", hello.host_id, offset_ms / 1000)
        self.registry.complete |= complete
        missing = [d for d in session.refs if d not in complete]
        return missing, dict(session.marks)

    async def _serve(self, session: AgentSession, context: grpc.aio.ServicerContext) -> None:
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
                # A measurement's result (its start or stop) is applied once the data the agent sent before
                # it is stored: a window's end ("stopped") is never visible before its last interval is (the
                # agent sends a measurement's last batch ahead of the stop's result; the ingest writer
                # stores it asynchronously). Every other result carries all it says and is applied at once:
                # held behind a data backlog (the writer minutes behind at load average ~20, run s16b), it
                # stalled every command of the host, an attach "sent" and never seen to start.
                if message.result.WhichOneof("kind") == "measurement":
                    await _until_stored(session.last_stored)
                await self.runtime.commands.on_result(session, message.result)
            elif kind == "progress":
                await self.runtime.commands.on_progress(session.host_id, message.progress)
            elif kind == "targets":
                await self._on_targets(session, message.targets)
            elif kind == "hello":
                raise InvalidInput("Hello may only be sent once per stream")
            else:
                raise InvalidInput("empty AgentMessage")

    # Catalog pieces -------------------------------------------------------------------------------

    # Data messages: metric batches and gaps ----------------------------------------------------

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
                    await db.execute(
                        text("UPDATE hosts SET online = false, last_seen = now() WHERE id = :h AND session_id = :s"),
                        {"h": session.host_id, "s": session.session_id},
                    )
                audit_log.record(
                    db,
                    f"agent:{session.host_id}",
                    "agent_disconnected",
                    session.host_id,
                    {
                        "session_id": session.session_id,
                        "replaced": replaced,
                        "dropped_samples": session.dropped_samples,
                    },
                )
                await db.commit()
            log.info(
                "agent disconnected: host %s session %s%s",
                session.host_id,
                session.session_id,
                " (replaced by a newer stream)" if replaced else "",
            )
            if not replaced:
                await self._publish_host(session.host_id)
        except Exception:  # noqa: BLE001 - shutting down, or the database is gone; presence resets at start
            log.warning("recording the disconnect of host %s failed", session.host_id)


async def _until_stored(future: "asyncio.Future[None] | None") -> None:
    """Wait until a data message is stored or failed (a failure ends the stream on its own)."""
    if future is None or future.done():
        return
    try:
        await asyncio.shield(future)
    except Exception:  # noqa: BLE001, S110 - the store failed: the data path ends the stream for it
        pass


def _decoder(message_type: type[Message]) -> Callable[[bytes], Message | Undecodable]:
    def decode(data: bytes) -> Message | Undecodable:
        try:
            return message_type.FromString(data)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the sender's malformed message
            return Undecodable(f"the {message_type.DESCRIPTOR.name} does not decode: {str(exc)[:120]}")

    return decode


def _handlers(service: AgentService) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Connect": grpc.stream_stream_rpc_method_handler(
                service.Connect,
                request_deserializer=_decoder(pb.AgentMessage),
                response_serializer=pb.ServerMessage.SerializeToString,
            ),
            "Enroll": grpc.unary_unary_rpc_method_handler(
                service.Enroll,
                request_deserializer=_decoder(pb.EnrollRequest),
                response_serializer=pb.EnrollResponse.SerializeToString,
            ),
        },
    )


def create_grpc_server(runtime: Runtime, bind: str, enroll_bind: str) -> tuple[grpc.aio.Server, int, int]:
    """Build the agents' gRPC server: Connect over mutual TLS on `bind`, enrolment over server-only TLS
    on `enroll_bind` (host:port, port 0 picks one); returns (server, agent port, enrolment port)."""
    settings = runtime.settings
    limit = settings.grpc_max_message_bytes
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.max_concurrent_streams", 4),
            ("grpc.max_metadata_size", 16 * 1024),
            ("grpc.keepalive_time_ms", 30000),
            ("grpc.keepalive_timeout_ms", 10000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 10000),
        ]
    )
    server.add_generic_rpc_handlers((_handlers(AgentService(runtime, runtime.agents)),))
    pki = runtime.pki
    pair = [(pki.server_key_pem, pki.server_cert_pem)]
    port = server.add_secure_port(
        bind, grpc.ssl_server_credentials(pair, root_certificates=pki.ca_pem, require_client_auth=True)
    )
    if port == 0:
        raise RuntimeError(f"cannot listen for agents on {bind}")
    enroll_port = server.add_secure_port(enroll_bind, grpc.ssl_server_credentials(pair))
    if enroll_port == 0:
        raise RuntimeError(f"cannot listen for agent enrolment on {enroll_bind}")
    return server, port, enroll_port
