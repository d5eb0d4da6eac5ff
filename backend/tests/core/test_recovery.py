# SPDX-License-Identifier: Apache-2.0
"""Crash recovery with real processes: a backend (`python -m app`, its own embedded Postgres and data
folder) killed with SIGKILL, its Postgres killed with SIGKILL, and a clean stop. A fake agent
(tests.scripted_agent) holds a stream meanwhile."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.core.postmaster import postmaster_pid
from tests.backend_process import Backend, _host, _postgres_gone
from tests.scripted_agent import ScriptedAgent, wait_until


async def test_after_kill_9_of_the_backend_hosts_show_offline_until_they_reconnect(data_folder, unique):
    backend = Backend(data_folder)
    await backend.start()
    await _frozen_start_up(backend)
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


async def _frozen_start_up(backend: Backend) -> None:
    """The serving process moved its start-up objects out of the garbage collector's walks (server.settle_heap:
    otherwise every full collection walks ~200,000 of them, 160-230 ms here), as its /metrics says."""
    from tests.api.test_metrics import _value

    async with httpx.AsyncClient() as c:
        metrics = (await c.get(f"{backend.url}/metrics")).text
    assert _value(metrics, "hotpath_gc_frozen_objects") > 100_000, [
        line for line in metrics.splitlines() if "gc" in line
    ]


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


_START = (
    "import logging, sys\n"
    "from pathlib import Path\n"
    "from app.core.db import EmbeddedPostgres\n"
    "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
    "print(EmbeddedPostgres(Path(sys.argv[1]), watchdog=False).start(), flush=True)\n"
)


def test_a_start_waits_for_a_postgres_that_is_stopping(data_folder):
    """A backend started while its embedded Postgres is still stopping (the watchdog of the backend just
    killed with SIGKILL stopping it) waits until it is gone and starts it anew. Before, pgserver's check
    that a running server is 'ready' failed, and the backend exited with "start-up failed: " and no
    reason (bench/chaos, restarting the backend at once after kill -9, in a loaded run). Here a session
    holds a smart shutdown in 'stopping' until the new start says it waits."""
    from pgserver._commands import POSTGRES_BIN_PATH
    from sqlalchemy import create_engine, text

    from app.core.postmaster import postmaster_status

    pgdata = data_folder / "pgdata"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    first = subprocess.run(
        [sys.executable, "-c", _START, str(pgdata)], capture_output=True, text=True, env=env, timeout=120
    )
    assert first.returncode == 0, first.stderr
    engine = create_engine(first.stdout.strip().splitlines()[-1])
    conn = engine.connect()
    conn.execute(text("SELECT 1"))
    user = "pgserver" if os.geteuid() == 0 else None
    subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-m", "smart", "-W", "stop"],
        user=user,
        check=True,
        capture_output=True,
    )
    deadline = time.monotonic() + 30
    while postmaster_status(pgdata) != "stopping":
        assert time.monotonic() < deadline, f"the smart shutdown did not begin: {postmaster_status(pgdata)}"
        time.sleep(0.1)
    second = subprocess.Popen(
        [sys.executable, "-c", _START, str(pgdata)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        said = ""
        assert second.stderr is not None
        for line in second.stderr:  # the start says it waits (or fails: the stream ends)
            said += line
            if "waiting until it is ready or stopped" in line:
                break
        conn.close()  # the old server's last session ends: it stops
        engine.dispose()
        out, err = second.communicate(timeout=120)
    finally:
        if second.poll() is None:
            second.kill()
    assert second.returncode == 0, said + err
    assert "is stopping: waiting" in said
    url = out.strip().splitlines()[-1]
    fresh = create_engine(url)
    with fresh.connect() as c:
        assert c.execute(text("SELECT 1")).scalar() == 1
    fresh.dispose()
