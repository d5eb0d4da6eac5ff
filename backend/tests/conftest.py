# SPDX-License-Identifier: Apache-2.0
"""Test fixtures: ONE real Postgres per test session (embedded pgserver in a temporary folder, or the
server at DATABASE_URL), a database migrated with Alembic, and the real backend — HTTP and gRPC servers
on free loopback ports in the session's event loop — exactly as `python -m app` assembles it."""

import os
import secrets
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.core import pki
from app.core.config import Settings, normalise_database_url
from app.core.db import start_embedded_postgres, stop_embedded_postgres, upgrade_database
from app.server import Prepared, build_runtime, ensure_admin, start_servers, stop_servers
from tests.scripted_agent import Credentials, ScriptedAgent, enroll, new_token


def _recreate_database(server_url: str, name: str) -> str:
    url = make_url(server_url)
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_url():
    """URL of a Postgres server (not a database in it): embedded, started once, stopped at the end."""
    if os.environ.get("DATABASE_URL"):
        yield normalise_database_url(os.environ["DATABASE_URL"])
        return
    folder = Path(tempfile.mkdtemp(prefix="hotpath-test-pg-"))
    server, url = start_embedded_postgres(folder / "pgdata")
    try:
        yield url
    finally:
        stop_embedded_postgres(server)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def database_url(postgres_url, worker_id):
    # One database per pytest-xdist worker ("master" when the tests run in one process): with the embedded
    # Postgres each worker has a server of its own anyway; with DATABASE_URL they share one server.
    url = _recreate_database(postgres_url, f"hotpath_test_{worker_id}")
    upgrade_database(url)
    return url


@pytest.fixture(scope="session")
def data_dir():
    folder = Path(tempfile.mkdtemp(prefix="hotpath-test-data-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
async def backend(database_url, data_dir):
    """The running backend: its runtime, HTTP base URL and gRPC target."""
    settings = Settings(
        data_dir=data_dir,
        http_host="127.0.0.1",
        http_port=0,
        grpc_host="127.0.0.1",
        grpc_port=0,
        command_timeout_s=3.0,
        ws_ping_interval_s=20.0,
        database_url=database_url,
        # Every test signs in and enrols from 127.0.0.1: the per-address limits are tested
        # on their own.
        login_attempts_per_minute=100_000,
        enrolment_requests_per_minute=100_000,
        # The retention loop's pass would run at a moment of its own choosing (every 5 minutes by
        # default), dropping the partitions of the past a test has just made: tests that need the
        # pass run it themselves (test_retention), at a known time.
        retention_interval_s=86_400.0,
    )
    ensure_admin(database_url, data_dir / "admin-password")
    prepared = Prepared(
        database_url=database_url, secret_key=secrets.token_bytes(32), pki=pki.load_or_create(data_dir / "tls")
    )
    runtime = build_runtime(settings, prepared)
    grpc_server, http, http_task, grpc_port, http_port = await start_servers(runtime)

    class Backend:
        runtime: Any
        base_url: str
        grpc_target: str
        enroll_target: str
        ca_pem: bytes
        admin_password: str

        async def credentials(self, host_id: str) -> Credentials:
            """Enrol `host_id` with a fresh one-time token for it, as an agent would."""
            return await enroll(
                self.enroll_target, self.ca_pem, host_id, await new_token(self.runtime, host_id=host_id)
            )

        async def agent(self, host_id: str, **kwargs) -> ScriptedAgent:
            """A fake agent for `host_id`, enrolled and ready to connect."""
            return ScriptedAgent(self.grpc_target, await self.credentials(host_id), host_id, **kwargs)

        async def scalar(self, sql: str, **params: Any) -> Any:
            """The one value a query of the backend's database returns."""
            async with self.runtime.engine.connect() as conn:
                return (await conn.execute(text(sql), params)).scalar_one()

    b = Backend()
    b.runtime = runtime
    b.base_url = f"http://127.0.0.1:{http_port}"
    b.grpc_target = f"127.0.0.1:{grpc_port}"
    b.enroll_target = f"127.0.0.1:{runtime.enroll_port}"
    b.ca_pem = runtime.pki.ca_pem
    b.admin_password = (data_dir / "admin-password").read_text().strip()
    yield b
    await stop_servers(runtime, grpc_server, http, http_task)


@pytest.fixture(scope="session")
async def admin_token(backend) -> str:
    async with httpx.AsyncClient(base_url=backend.base_url) as c:
        r = await c.post("/api/v1/auth/login", json={"username": "admin", "password": backend.admin_password})
        assert r.status_code == 200, r.text
        return r.json()["access_token"]


@pytest.fixture
async def client(backend, admin_token):
    """An HTTP client signed in as admin."""
    async with httpx.AsyncClient(
        base_url=backend.base_url, timeout=30, headers={"Authorization": f"Bearer {admin_token}"}
    ) as c:
        yield c


@pytest.fixture
async def anon(backend):
    async with httpx.AsyncClient(base_url=backend.base_url, timeout=30) as c:
        yield c


@pytest.fixture
def unique() -> str:
    """A short unique suffix, so tests sharing the session's database never see each other's hosts."""
    return uuid.uuid4().hex[:10]


async def make_user(client: httpx.AsyncClient, role: str, unique: str) -> tuple[str, str]:
    username, password = f"{role}-{unique}", secrets.token_urlsafe(12)
    r = await client.post("/api/v1/users", json={"username": username, "password": password, "role": role})
    assert r.status_code == 201, r.text
    return username, password


async def token_for(base_url: str, username: str, password: str) -> str:
    async with httpx.AsyncClient(base_url=base_url) as c:
        r = await c.post("/api/v1/auth/login", json={"username": username, "password": password})
        assert r.status_code == 200, r.text
        return r.json()["access_token"]


pytest_plugins = ["tests.backend_process"]  # its data_folder fixture
