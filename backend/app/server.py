# SPDX-License-Identifier: Apache-2.0
"""Assembling and running one backend process; shared by `python -m app` and the tests.

`prepare` does the synchronous start-up work (data folder, database, migrations, secrets, first admin);
`build_runtime` creates the async objects; `serve` runs uvicorn and the gRPC server in the current
event loop, plus the sample-retention task, until `stop` is set.
"""
import asyncio
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from sqlalchemy import create_engine, text

from app.core.config import Settings, normalise_database_url
from app.core.db import make_engine, make_sessionmaker, start_embedded_postgres, stop_embedded_postgres, upgrade_database
from app.core.security import hash_password, read_or_create_secret
from app.grpc.agent_service import AgentRegistry, create_grpc_server
from app.main import create_app
from app.runtime import Runtime
from app.samples import prune_samples

log = logging.getLogger("hotpath")


@dataclass
class Prepared:
    database_url: str
    secret_key: bytes
    agent_token: str
    embedded: object | None = None

    def close(self) -> None:
        if self.embedded is not None:
            log.info("stopping the embedded Postgres")
            stop_embedded_postgres(self.embedded)
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
        embedded, url = start_embedded_postgres(data_dir / "pgdata")
    prepared = Prepared(database_url=url, secret_key=b"", agent_token="", embedded=embedded)
    try:
        upgrade_database(url)
        prepared.secret_key = read_or_create_secret(data_dir / "secret-key", lambda: secrets.token_hex(32)).encode()
        prepared.agent_token = read_or_create_secret(data_dir / "agent-token", lambda: secrets.token_urlsafe(32))
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
            conn.execute(text("INSERT INTO users (id, username, password_hash, role) "
                              "VALUES (gen_random_uuid(), 'admin', :p, 'admin')"), {"p": hash_password(password)})
            conn.execute(text("INSERT INTO audit_log (actor, action, target, detail) "
                              "VALUES ('system', 'user_created', 'admin', '{\"role\": \"admin\"}'::jsonb)"))
        os.chmod(password_file, 0o600)
        log.info("created user 'admin'; its password is in %s", password_file)
    finally:
        engine.dispose()


def build_runtime(settings: Settings, prepared: Prepared) -> Runtime:
    engine = make_engine(prepared.database_url)
    runtime = Runtime(settings=settings, engine=engine, sessionmaker=make_sessionmaker(engine),
                      secret_key=prepared.secret_key, agent_token=prepared.agent_token)
    runtime.agents = AgentRegistry(runtime)
    runtime.metrics.bind(runtime)
    return runtime


async def retention_loop(runtime: Runtime) -> None:
    settings = runtime.settings
    while True:
        try:
            deleted = await prune_samples(runtime.engine, settings.sample_retention_hours)
            if deleted:
                log.info("retention: deleted %d sample rows older than %g h", deleted, settings.sample_retention_hours)
        except Exception:  # noqa: BLE001 - try again next round
            log.exception("retention pass failed")
        await asyncio.sleep(settings.retention_interval_s)


class _Uvicorn(uvicorn.Server):
    def install_signal_handlers(self) -> None:
        pass  # the process's own handler stops both servers together


async def start_servers(runtime: Runtime, http_port: int | None = None, grpc_port: int | None = None):
    """Start the gRPC and HTTP servers; returns (grpc server, uvicorn server, http task, grpc port, http port)."""
    settings = runtime.settings
    grpc_server, bound = create_grpc_server(
        runtime, f"{settings.grpc_host}:{settings.grpc_port if grpc_port is None else grpc_port}")
    await grpc_server.start()
    log.info("listening for agents (gRPC) on %s:%d", settings.grpc_host, bound)
    app = create_app(runtime, settings.static_dir)
    config = uvicorn.Config(app, host=settings.http_host, port=settings.http_port if http_port is None else http_port,
                            log_level="warning", ws_ping_interval=None, lifespan="off")
    http = _Uvicorn(config)
    http_task = asyncio.create_task(http.serve())
    while not http.started:
        if http_task.done():
            await http_task  # surfaces the bind error
            raise RuntimeError("the HTTP server stopped during start-up")
        await asyncio.sleep(0.02)
    http_port = http.servers[0].sockets[0].getsockname()[1]
    log.info("serving the API%s on http://%s:%d/", " and console" if settings.static_dir and
             (settings.static_dir / "index.html").is_file() else "", settings.http_host, http_port)
    return grpc_server, http, http_task, bound, http_port


async def stop_servers(runtime: Runtime, grpc_server, http, http_task) -> None:
    await runtime.agents.close_all()
    await grpc_server.stop(grace=2)
    http.should_exit = True
    try:
        await asyncio.wait_for(http_task, 10)
    except asyncio.TimeoutError:
        http_task.cancel()
    await runtime.engine.dispose()


async def serve(runtime: Runtime, stop: asyncio.Event) -> None:
    grpc_server, http, http_task, _, _ = await start_servers(runtime)
    retention = asyncio.create_task(retention_loop(runtime))
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({stopper, http_task}, return_when=asyncio.FIRST_COMPLETED)
    log.info("stopping")
    retention.cancel()
    stopper.cancel()
    await stop_servers(runtime, grpc_server, http, http_task)
