# SPDX-License-Identifier: Apache-2.0
"""Crash recovery with real processes: a backend (`python -m app`, its own embedded Postgres and data
folder) killed with SIGKILL, its Postgres killed with SIGKILL, and a clean stop. A fake agent
(tests.scripted_agent) holds a stream meanwhile."""
import asyncio
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from app.core.db import postmaster_pid
from tests.scripted_agent import ScriptedAgent, enroll, wait_until

BACKEND_DIR = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Backend:
    """One `python -m app` process on free ports with its own data folder."""

    def __init__(self, data: Path, https: bool = False) -> None:
        self.data = data
        self.https = https
        self.http, self.grpc = _free_port(), _free_port()
        self.enroll = _free_port()
        self.proc: asyncio.subprocess.Process | None = None
        self.url = f"{'https' if https else 'http'}://127.0.0.1:{self.http}"

    async def start(self) -> None:
        env = dict(os.environ, HOTPATH_DATA_DIR=str(self.data), HOTPATH_HTTP_PORT=str(self.http),
                   HOTPATH_GRPC_PORT=str(self.grpc), HOTPATH_ENROLL_PORT=str(self.enroll),
                   HOTPATH_HTTP_HOST="127.0.0.1", HOTPATH_GRPC_HOST="127.0.0.1",
                   HOTPATH_HTTPS="1" if self.https else "0")
        env.pop("DATABASE_URL", None)
        log = open(self.data / "backend.log", "ab")  # noqa: SIM115, ASYNC230 - the child keeps it
        self.proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "app", cwd=BACKEND_DIR, env=env,
                                                         stdout=log, stderr=log)
        _started.append(self.proc)
        await self.wait_health(200, 120)

    async def health(self) -> int:
        try:
            verify = str(self.data / "tls" / "ca.pem") if self.https else True
            if self.https and not (self.data / "tls" / "ca.pem").exists():
                return 0  # not created yet: the backend is still starting
            async with httpx.AsyncClient(timeout=3, verify=verify) as c:
                return (await c.get(f"{self.url}/api/v1/health")).status_code
        except httpx.HTTPError:
            return 0

    async def wait_health(self, code: int, timeout: float) -> None:
        end = time.monotonic() + timeout
        while await self.health() != code:
            if self.proc is not None and self.proc.returncode is not None:
                pytest.fail(f"the backend exited: {(self.data / 'backend.log').read_text()[-3000:]}")
            if time.monotonic() > end:
                pytest.fail(f"/health did not answer {code} within {timeout} s")
            await asyncio.sleep(0.2)

    async def admin(self) -> httpx.AsyncClient:
        password = (self.data / "admin-password").read_text().strip()
        async with httpx.AsyncClient(base_url=self.url) as c:
            token = (await c.post("/api/v1/auth/login", json={"username": "admin", "password": password})).json()
        return httpx.AsyncClient(base_url=self.url, headers={"Authorization": f"Bearer {token['access_token']}"})

    async def agent(self, host_id: str) -> ScriptedAgent:
        async with await self.admin() as c:
            created = (await c.post("/api/v1/enrolment-tokens", json={"note": "recovery test"})).json()
        creds = await enroll(f"127.0.0.1:{self.enroll}", created["ca_pem"].encode(), host_id, created["token"])
        return ScriptedAgent(f"127.0.0.1:{self.grpc}", creds, host_id, kernel_tag=f"rec-{host_id}")

    async def kill(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        await self.proc.wait()


async def _host(backend: Backend, host_id: str) -> dict:
    async with await backend.admin() as c:
        return (await c.get(f"/api/v1/hosts/{host_id}")).json()


async def _postgres_gone(pgdata: Path, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while postmaster_pid(pgdata) is not None:
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.2)
    return True


_started: list[asyncio.subprocess.Process] = []


@pytest.fixture
def data_folder():
    folder = Path(tempfile.mkdtemp(prefix="hotpath-recovery-"))
    yield folder
    # Never leave a backend or its Postgres behind, whatever failed: the backend first (it would
    # restart a Postgres killed under it), then Postgres.
    while _started:
        proc = _started.pop()
        if proc.returncode is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
    pid = postmaster_pid(folder / "pgdata")
    if pid is not None:
        os.kill(pid, signal.SIGKILL)


async def test_after_kill_9_of_the_backend_hosts_show_offline_until_they_reconnect(data_folder, unique):
    backend = Backend(data_folder)
    await backend.start()
    host_id = f"k9-{unique}"
    agent = await backend.agent(host_id)
    await agent.connect()
    assert (await _host(backend, host_id))["online"] is True

    await backend.kill(signal.SIGKILL)
    # The watchdog stops the embedded Postgres of a killed backend.
    assert await _postgres_gone(data_folder / "pgdata", 15), "the embedded Postgres outlived its backend"
    t0 = time.monotonic()
    await backend.start()
    host = await _host(backend, host_id)
    assert host["online"] is False, "a restarted backend must not show a host online without its stream"
    assert time.monotonic() - t0 < 60

    again = ScriptedAgent(agent.target, agent.credentials, host_id, kernel_tag=f"rec-{host_id}")
    await again.connect()
    assert (await _host(backend, host_id))["online"] is True
    await again.close()
    await backend.kill(signal.SIGTERM)
    assert await _postgres_gone(data_folder / "pgdata", 15), "a clean stop must stop the embedded Postgres"


async def test_the_backend_survives_kill_9_of_its_postgres_with_503_meanwhile(data_folder, unique):
    backend = Backend(data_folder)
    await backend.start()
    host_id = f"pg9-{unique}"
    agent = await backend.agent(host_id)
    await agent.connect()
    pid = postmaster_pid(data_folder / "pgdata")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    seen = set()
    end = time.monotonic() + 60
    recovered = False
    while time.monotonic() < end:
        code = await backend.health()
        seen.add(code)
        if code == 200 and postmaster_pid(data_folder / "pgdata") not in (None, pid):
            recovered = True
            break
        await asyncio.sleep(0.05)
    assert recovered, f"no recovery within 60 s (statuses seen: {seen})"
    assert seen <= {200, 503}, f"health answered {seen - {200, 503}} while Postgres was down"
    async with await backend.admin() as c:
        assert (await c.get("/api/v1/hosts")).status_code == 200
    # The agent's stream was ended by the outage; it reconnects and is online again.
    again = ScriptedAgent(agent.target, agent.credentials, host_id, kernel_tag=f"rec-{host_id}")
    await again.connect()

    async def online():
        return (await _host(backend, host_id))["online"]

    await wait_until(online)
    await again.close()
    await backend.kill(signal.SIGTERM)
    assert await _postgres_gone(data_folder / "pgdata", 15)


async def test_the_https_option_serves_the_api_with_the_installation_ca(data_folder):
    backend = Backend(data_folder, https=True)
    await backend.start()  # /health answered over TLS, verified against tls/ca.pem
    async with httpx.AsyncClient(verify=str(data_folder / "tls" / "ca.pem")) as c:
        r = await c.get(f"https://localhost:{backend.http}/api/v1/health")
    assert r.status_code == 200 and r.headers["strict-transport-security"].startswith("max-age=")
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as c:  # the system's CAs do not know the installation CA
            await c.get(f"https://127.0.0.1:{backend.http}/api/v1/health")
    await backend.kill(signal.SIGTERM)
