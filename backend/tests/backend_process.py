# SPDX-License-Identifier: Apache-2.0
"""Backends as real processes for the tests that need them (crash recovery, replicas) and for
bench/catalog_store: `python -m app` on free ports with a data folder of its own, and a fixture that
never leaves one (or its Postgres) running, whatever failed."""

import asyncio
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.postmaster import postmaster_pid
from tests.scripted_agent import HANG_S, ScriptedAgent, enroll

BACKEND_DIR = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Backend:
    """One `python -m app` process on free ports with its own data folder."""

    def __init__(self, data: Path, https: bool = False, env: dict[str, str] | None = None) -> None:
        self.data = data
        self.https = https
        self.env = env or {}  # more of its environment (DATABASE_URL is dropped unless given here)
        self.http, self.grpc = _free_port(), _free_port()
        self.enroll = _free_port()
        self.proc: asyncio.subprocess.Process | None = None
        self.url = f"{'https' if https else 'http'}://127.0.0.1:{self.http}"

    async def start(self) -> None:
        env = dict(
            os.environ,
            HOTPATH_DATA_DIR=str(self.data),
            HOTPATH_HTTP_PORT=str(self.http),
            HOTPATH_GRPC_PORT=str(self.grpc),
            HOTPATH_ENROLL_PORT=str(self.enroll),
            HOTPATH_HTTP_HOST="127.0.0.1",
            HOTPATH_GRPC_HOST="127.0.0.1",
            HOTPATH_HTTPS="1" if self.https else "0",
        )
        env.pop("DATABASE_URL", None)
        env.update(self.env)
        log = open(self.data / "backend.log", "ab")  # noqa: SIM115, ASYNC230 - the child keeps it
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app", cwd=BACKEND_DIR, env=env, stdout=log, stderr=log
        )
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
        # httpx's default 5 s is a speed check: under load (a backend just restarted beside two test runs)
        # an answer took longer. The bound is a hang's.
        async with httpx.AsyncClient(base_url=self.url, timeout=HANG_S) as c:
            token = (await c.post("/api/v1/auth/login", json={"username": "admin", "password": password})).json()
        return httpx.AsyncClient(
            base_url=self.url, timeout=HANG_S, headers={"Authorization": f"Bearer {token['access_token']}"}
        )

    async def agent(self, host_id: str, **kwargs: Any) -> ScriptedAgent:
        """A scripted agent for `host_id`, enrolled and ready to connect; kwargs go to ScriptedAgent."""
        async with await self.admin() as c:
            created = (await c.post("/api/v1/enrolment-tokens", json={"note": "recovery test"})).json()
        creds = await enroll(f"127.0.0.1:{self.enroll}", created["ca_pem"].encode(), host_id, created["token"])
        kwargs.setdefault("kernel_tag", f"rec-{host_id}")
        return ScriptedAgent(f"127.0.0.1:{self.grpc}", creds, host_id, **kwargs)

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
        end = time.monotonic() + 10
        while time.monotonic() < end and postmaster_pid(folder / "pgdata") is not None:
            time.sleep(0.1)
    # Its Postgres cluster is tens of MB: a run of the suite left a dozen in /tmp.
    shutil.rmtree(folder, ignore_errors=True)
