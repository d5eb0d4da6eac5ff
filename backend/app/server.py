# SPDX-License-Identifier: Apache-2.0
"""Assembling and running one backend process; shared by `python -m app` and the tests.

`prepare` does the synchronous start-up work (data folder, database, migrations, secrets, the
certificate authority, first admin); `build_runtime` creates the async objects; `serve` runs uvicorn
and the gRPC server in the current event loop, plus the ingest writer, the replicas' bus
(LISTEN/NOTIFY), the command sweep, the series' maintenance (partitions ahead, retention by dropping
partitions) and rollup tasks, and the embedded Postgres's supervisor, until `stop` is set.

Presence comes from live streams: at start this replica marks offline every host whose stream it
held (they reconnect within seconds), and staged catalog uploads a stopped backend left are removed.
"""

import asyncio
import gc
import logging
import os
import secrets
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import orjson
import uvicorn
from fastapi import FastAPI
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.agents.service import create_grpc_server
from app.api.main import create_app
from app.core import bus as bus_module
from app.core import pki as pki_module
from app.core.config import Settings, normalise_database_url
from app.core.db import EmbeddedPostgres, describe_error, make_engine, make_sessionmaker, upgrade_database
from app.core.live import LiveHub
from app.core.metrics import Metrics
from app.core.security import hash_password, read_or_create_secret
from app.domain.commands import Commands
from app.domain.plans import Plans
from app.domain.rollouts import Rollouts
from app.domain.sessions import AgentRegistry
from app.runtime import Runtime
from app.storage import catalog, hosts, node_moves, nodes, samples, stacks
from app.storage.ingest import IngestWriter, Item

log = logging.getLogger("hotpath")


@dataclass
class Prepared:
    database_url: str
    secret_key: bytes
    pki: pki_module.Pki | None = None
    embedded: EmbeddedPostgres | None = None
    run_lock: node_moves.RunLock | None = None  # held while this backend runs: no move of hosts meanwhile

    def close(self) -> None:
        if self.run_lock is not None:
            self.run_lock.close()
            self.run_lock = None
        if self.embedded is not None:
            log.info("stopping the embedded Postgres")
            self.embedded.stop()
            self.embedded = None


def prepare(settings: Settings) -> Prepared:
    data_dir = settings.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    embedded = None
    if settings.database_url:
        url = normalise_database_url(settings.database_url)
        log.info("using the Postgres at DATABASE_URL")
    else:
        log.info("starting the embedded Postgres in %s", data_dir / "pgdata")
        embedded = EmbeddedPostgres(data_dir / "pgdata")
        url = embedded.start()
    prepared = Prepared(database_url=url, secret_key=b"", embedded=embedded)
    node_urls = nodes.parse(settings.db_nodes)
    if node_urls and embedded is not None:
        raise ValueError("HOTPATH_DB_NODES needs DATABASE_URL: the embedded Postgres has no postgres_fdw")
    try:
        if embedded is None:
            prepared.run_lock = node_moves.backend_lock(url, node_urls)
        if node_urls and nodes.migration_pending(url):
            nodes.detach(url)  # a partition's columns cannot change: setup attaches them again
        upgrade_database(url)
        if node_urls:
            nodes.setup(url, node_urls)
        prepared.secret_key = read_or_create_secret(data_dir / "secret-key", lambda: secrets.token_hex(32)).encode()
        prepared.pki = pki_module.load_or_create(data_dir / "tls", settings.tls_server_names)
        ensure_admin(url, data_dir / "admin-password")
    except BaseException:
        prepared.close()
        raise
    return prepared


def ensure_admin(url: str, password_file: Path) -> None:
    """Create the `admin` user once, with a random password written to `password_file` (mode 0600)."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            exists = conn.execute(text("SELECT 1 FROM users WHERE username = 'admin'")).first()
            if exists:
                return
            password = read_or_create_secret(password_file, lambda: secrets.token_urlsafe(12))
            created = conn.execute(
                text(
                    "INSERT INTO users (id, username, password_hash, role) "
                    "VALUES (gen_random_uuid(), 'admin', :p, 'admin') "
                    "ON CONFLICT (username) DO NOTHING RETURNING id"
                ),
                {"p": hash_password(password)},
            ).first()
            if created is None:
                return  # a replica sharing this database created it a moment ago
            conn.execute(
                text(
                    "INSERT INTO audit_log (actor, action, target, detail) "
                    "VALUES ('system', 'user_created', 'admin', '{\"role\": \"admin\"}'::jsonb)"
                )
            )
        os.chmod(password_file, 0o600)
        log.info("created user 'admin'; its password is in %s", password_file)
    finally:
        engine.dispose()


def build_runtime(settings: Settings, prepared: Prepared) -> Runtime:
    assert prepared.pki is not None
    engine = make_engine(prepared.database_url)
    replica = settings.replica_id or f"{socket.gethostname()}:{settings.grpc_port}"
    sessionmaker = make_sessionmaker(engine)
    hub, metrics, agents = LiveHub(), Metrics(), AgentRegistry(engine)
    commands = Commands(settings, sessionmaker, hub, metrics, agents, replica)
    plans = Plans(settings, sessionmaker, hub, commands)

    def committed(items: list[Item], seconds: float) -> None:
        metrics.ingest_commits.inc()

    def failed(exc: BaseException) -> None:
        metrics.ingest_failed_commits.inc()

    node_urls = nodes.parse(settings.db_nodes)
    spread = nodes.Nodes(engine, node_urls) if node_urls else None
    nodes.configure(spread)
    writer = IngestWriter(engine, on_commit=committed, on_failure=failed, nodes=spread)
    metrics.ingest_failing.set_function(lambda: float(writer.failing))
    hosts.set_clock_skew(settings.max_clock_skew_s)
    metrics.bind(lambda: len(agents.sessions), lambda: hub.subscriber_count)
    return Runtime(
        settings=settings,
        engine=engine,
        sessionmaker=sessionmaker,
        secret_key=prepared.secret_key,
        pki=prepared.pki,
        replica_id=replica,
        hub=hub,
        metrics=metrics,
        agents=agents,
        commands=commands,
        plans=plans,
        rollouts=Rollouts(sessionmaker, hub, plans),
        writer=writer,
        database_url=prepared.database_url,
        nodes=spread,
    )


async def reset_presence(runtime: Runtime) -> None:
    """Mark offline the hosts whose streams this replica held before it (re)started, and drop catalog
    uploads that a stopped backend left half done."""
    async with runtime.engine.begin() as conn:
        result = await conn.execute(
            text("""
            UPDATE hosts SET online = false WHERE online AND (replica = :r OR replica IS NULL)"""),
            {"r": runtime.replica_id},
        )
    if result.rowcount:
        log.info("marked %d host(s) offline until their agents reconnect", result.rowcount)
    stale = await catalog.discard_stale_uploads(runtime.engine, older_than_s=0)
    if stale:
        log.info("removed %d unfinished catalog upload(s)", stale)


async def maintain_series(runtime: Runtime) -> int:
    """Partitions and retention on the coordinator and on every database node (each holds its hosts' series;
    a node that fails is logged and raised once the others had theirs)."""
    settings = runtime.settings

    async def one(engine: AsyncEngine) -> int:
        return await samples.maintain(
            engine,
            settings.sample_retention_hours,
            settings.rollup_retention_hours,
            audit_retention_days=settings.audit_retention_days,
            stack_retention_hours=settings.stack_retention_hours,
        )

    rows = await one(runtime.engine)
    failed: Exception | None = None
    for node in runtime.nodes.nodes if runtime.nodes else []:
        try:
            rows += await one(node.engine)
        except Exception as exc:  # noqa: BLE001 - the other nodes still have theirs; raised below
            log.warning("series maintenance on database %s failed (%s)", node.label, describe_error(exc))
            failed = failed or exc
    if failed is not None:
        raise failed
    return rows


async def retention_loop(runtime: Runtime) -> None:
    """Partitions ahead and retention, every retention interval (the first pass ran at start)."""
    settings = runtime.settings
    while True:
        await asyncio.sleep(settings.retention_interval_s)
        try:
            await maintain_series(runtime)
        except Exception as exc:  # noqa: BLE001 - try again next round
            log.warning(
                "retention pass failed (%s); next round in %g s", describe_error(exc), settings.retention_interval_s
            )


async def rollup_loop(runtime: Runtime) -> None:
    settings = runtime.settings
    while True:
        await asyncio.sleep(settings.rollup_interval_s)
        try:
            await samples.roll_up(runtime.engine, lag_s=settings.rollup_lag_s)
            async with runtime.sessionmaker() as session:
                await stacks.keep_closed_blocks(session, datetime.now(UTC))
        except Exception as exc:  # noqa: BLE001 - try again next round
            log.warning("rollup pass failed (%s); next round in %g s", describe_error(exc), settings.rollup_interval_s)
        # Each database node rolls up its own hosts' rows (ON CONFLICT merges work there, not through the
        # coordinator's spread tables), with the coordinator's hosts' groups for the stacks' group rollups; one
        # that is down waits for the next round, the others go on.
        groups: dict[str, str] | None = None
        for node in runtime.nodes.nodes if runtime.nodes else []:
            try:
                if groups is None:
                    groups = await samples.host_groups(runtime.engine)
                await samples.roll_up(node.engine, lag_s=settings.rollup_lag_s, groups=groups)
                async with make_sessionmaker(node.engine)() as session:
                    await stacks.keep_closed_blocks(session, datetime.now(UTC))
            except Exception as exc:  # noqa: BLE001 - try again next round
                log.warning("rollup pass on database %s failed (%s)", node.label, describe_error(exc))


async def start_background(runtime: Runtime) -> list[asyncio.Task[None]]:
    """The ingest writer, the replicas' bus, the command sweep, and the series' upkeep."""
    await maintain_series(runtime)  # partitions for the accepted window before any data arrives
    runtime.writer.start()
    hub = runtime.hub

    async def on_note(channel: str, payload: str) -> None:
        if channel == bus_module.LIVE:
            note = orjson.loads(payload)
            if note.get("r") == runtime.replica_id:
                return
            if "interest" in note:
                hub.remote_interest(note["r"], note["interest"])
            else:
                hub.deliver(note["t"], note["e"])
        else:
            await runtime.commands.on_notify(channel, payload)

    runtime.bus = bus_module.Bus(runtime.database_url, runtime.replica_id, on_note)
    runtime.bus.start()

    def fanout(topic: str, event: dict[str, Any]) -> None:
        payload = bus_module.live_payload(runtime.replica_id, topic, event)
        task = asyncio.get_running_loop().create_task(_notify(runtime, payload))
        runtime.agents.cleanups.add(task)
        task.add_done_callback(runtime.agents.cleanups.discard)

    def announce() -> None:
        payload = orjson.dumps({"r": runtime.replica_id, "interest": sorted(hub.local_topics())}).decode()
        if len(payload) > bus_module.MAX_PAYLOAD:
            payload = orjson.dumps({"r": runtime.replica_id, "interest": ["hosts"]}).decode()
        task = asyncio.get_running_loop().create_task(_notify(runtime, payload))
        runtime.agents.cleanups.add(task)
        task.add_done_callback(runtime.agents.cleanups.discard)

    async def refresh_interest() -> None:
        while True:
            await asyncio.sleep(20)
            if hub.local_topics():
                announce()

    hub.fanout = fanout
    hub.announce = announce
    runtime.commands.start()
    await runtime.rollouts.start()  # resume the roll-outs a stop left under way
    return [
        asyncio.create_task(retention_loop(runtime)),
        asyncio.create_task(rollup_loop(runtime)),
        asyncio.create_task(refresh_interest()),
        asyncio.create_task(runtime.plans.reconcile_loop()),
    ]


async def _notify(runtime: Runtime, payload: str) -> None:
    try:
        async with runtime.engine.connect() as conn:
            await conn.execute(text("SELECT pg_notify(:c, :p)"), {"c": bus_module.LIVE, "p": payload})
            await conn.commit()
    except Exception:  # noqa: BLE001, S110 - a live event is a hint; the console also polls
        pass


async def stop_background(runtime: Runtime, tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    runtime.hub.fanout = None
    runtime.hub.announce = None
    await runtime.rollouts.stop()
    await runtime.plans.stop()
    await runtime.commands.stop()
    if runtime.bus is not None:
        await runtime.bus.stop()
    await runtime.writer.stop()


async def supervise_postgres(embedded: EmbeddedPostgres, interval_s: float = 1.0) -> None:
    """Restart the embedded Postgres when it dies; the engine's pool reconnects on its next use."""
    while True:
        await asyncio.sleep(interval_s)
        if embedded.running():
            continue
        log.error("the embedded Postgres is not running; restarting it")
        try:
            await asyncio.to_thread(embedded.start)
            log.info("the embedded Postgres is back")
        except Exception:  # noqa: BLE001 - keep trying; /health answers 503 meanwhile
            log.exception("restarting the embedded Postgres failed; trying again")


class _Uvicorn(uvicorn.Server):
    def install_signal_handlers(self) -> None:
        pass  # the process's own handler stops both servers together


def http_config(runtime: Runtime, app: FastAPI, settings: Settings, port: int) -> uvicorn.Config:
    """The HTTP server's configuration. X-Forwarded-For and X-Forwarded-Proto are honoured only from the
    addresses in HOTPATH_TRUSTED_PROXIES (none by default, whatever uvicorn's FORWARDED_ALLOW_IPS says):
    otherwise any client, even one on loopback, could pick the address the per-address sign-in limit
    and the audit log see."""
    tls: dict[str, Any] = {}
    if settings.https:
        tls = {
            "ssl_certfile": str(settings.https_cert_file or runtime.pki.server_cert_file),
            "ssl_keyfile": str(settings.https_key_file or runtime.pki.server_key_file),
        }
    proxies = settings.trusted_proxy_list
    return uvicorn.Config(
        app,
        host=settings.http_host,
        port=port,
        log_level="warning",
        ws_ping_interval=None,
        lifespan="off",
        limit_concurrency=1000,
        # An idle keep-alive connection is closed after 75 s, not uvicorn's 5: a client that reuses its
        # connection just as the server closes it gets a reset (seen from the browser tests' API client),
        # and 75 s outlasts the idle pauses of a console's polling and is the usual proxies' idle window.
        timeout_keep_alive=75,
        h11_max_incomplete_event_size=64 * 1024,
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or [],
        **tls,
    )


async def start_servers(
    runtime: Runtime, http_port: int | None = None, grpc_port: int | None = None
) -> tuple[grpc.aio.Server, "_Uvicorn", asyncio.Task[None], int, int]:
    """Start the gRPC and HTTP servers; returns (grpc server, uvicorn server, http task, grpc port, http port).
    The enrolment port is in runtime.enroll_port."""
    settings = runtime.settings
    port = settings.grpc_port if grpc_port is None else grpc_port
    enroll = settings.enroll_port or (port + 1 if port else 0)
    await reset_presence(runtime)
    runtime.background = await start_background(runtime)
    grpc_server, bound, enroll_bound = create_grpc_server(
        runtime, f"{settings.grpc_host}:{port}", f"{settings.grpc_host}:{enroll}"
    )
    await grpc_server.start()
    runtime.enroll_port = enroll_bound
    log.info(
        "listening for agents on %s:%d (mutual TLS) and for enrolment on %s:%d (TLS)",
        settings.grpc_host,
        bound,
        settings.grpc_host,
        enroll_bound,
    )
    app = create_app(runtime, settings.static_dir)
    config = http_config(runtime, app, settings, settings.http_port if http_port is None else http_port)
    http = _Uvicorn(config)
    http_task = asyncio.create_task(http.serve())
    while not http.started:
        if http_task.done():
            await http_task  # surfaces the bind error
            raise RuntimeError("the HTTP server stopped during start-up")
        await asyncio.sleep(0.02)
    http_port = http.servers[0].sockets[0].getsockname()[1]
    log.info(
        "serving the API%s on %s://%s:%d/",
        " and console" if settings.static_dir and (settings.static_dir / "index.html").is_file() else "",
        "https" if settings.https else "http",
        settings.http_host,
        http_port,
    )
    return grpc_server, http, http_task, bound, http_port


async def stop_servers(
    runtime: Runtime, grpc_server: grpc.aio.Server, http: "_Uvicorn", http_task: asyncio.Task[None]
) -> None:
    await runtime.agents.close_all()
    await grpc_server.stop(grace=2)
    await stop_background(runtime, runtime.background)
    http.should_exit = True
    try:
        await asyncio.wait_for(http_task, 10)
    except TimeoutError:
        http_task.cancel()
    if runtime.nodes is not None:
        await runtime.nodes.dispose()
    await runtime.engine.dispose()


def settle_heap() -> None:
    """Move the objects the start-up made (modules, routes, models, schemas: about 200,000) out of the garbage
    collector's sight, for the process' life. A full collection walks every tracked object, and a request that
    allocates a few thousand objects sets one off every few requests: at start-up's size each took 160-230 ms on
    this machine (bench/fleet's hot code answer, 155 ms, then took 2x as long every fifth request). After
    this, a full collection walks only what was made since. Done once, by the serving process: objects frozen
    stay until it exits, as those of start-up do anyway."""
    gc.collect()
    gc.freeze()


async def serve(runtime: Runtime, stop: asyncio.Event, embedded: EmbeddedPostgres | None = None) -> None:
    grpc_server, http, http_task, _, _ = await start_servers(runtime)
    settle_heap()
    tasks = []
    if embedded is not None:
        tasks.append(asyncio.create_task(supervise_postgres(embedded)))
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({stopper, http_task}, return_when=asyncio.FIRST_COMPLETED)
    log.info("stopping")
    for task in tasks:
        task.cancel()
    stopper.cancel()
    await stop_servers(runtime, grpc_server, http, http_task)
