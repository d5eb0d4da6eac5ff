# SPDX-License-Identifier: Apache-2.0
"""Two backend processes (`python -m app`, replicas A and B) on one Postgres: the agent's stream is
held by A, the console talks to B. A command accepted by B is sent by A (Postgres LISTEN/NOTIFY),
its result is visible through B, a quick command (inspect) answered on A wakes the request waiting on
B, and a WebSocket on B receives the samples of a host whose stream A holds. Also: a backend restart
(SIGKILL) — the agent reconnects and its measurement continues."""

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from app.protocol.proto import pb
from tests.backend_process import BACKEND_DIR, Backend, _postgres_gone, _started
from tests.conftest import _recreate_database
from tests.scripted_agent import HANG_S, ScriptedAgent, wait_for_ack, wait_until


class Replica(Backend):
    """A backend process on a shared database, with a replica id of its own."""

    def __init__(self, data: Path, database_url: str, replica: str) -> None:
        super().__init__(data)
        self.database_url = database_url
        self.replica = replica

    async def start(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        env = dict(
            os.environ,
            HOTPATH_DATA_DIR=str(self.data),
            HOTPATH_HTTP_PORT=str(self.http),
            HOTPATH_GRPC_PORT=str(self.grpc),
            HOTPATH_ENROLL_PORT=str(self.enroll),
            HOTPATH_HTTP_HOST="127.0.0.1",
            HOTPATH_GRPC_HOST="127.0.0.1",
            HOTPATH_HTTPS="0",
            DATABASE_URL=self.database_url,
            HOTPATH_REPLICA_ID=self.replica,
        )
        log = open(self.data / "backend.log", "ab")  # noqa: SIM115, ASYNC230 - the child keeps it
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app", cwd=BACKEND_DIR, env=env, stdout=log, stderr=log
        )
        _started.append(self.proc)
        await self.wait_health(200, 120)


@pytest.fixture
async def replicas(postgres_url, data_folder):
    url = _recreate_database(postgres_url, f"hotpath_routing_{uuid.uuid4().hex[:8]}")
    a = Replica(data_folder / "a", url, "replica-a")
    await a.start()
    b = Replica(data_folder / "b", url, "replica-b")
    # B shares A's users; its admin signs in with A's password.
    (data_folder / "b").mkdir(parents=True, exist_ok=True)
    (data_folder / "b" / "admin-password").write_text((data_folder / "a" / "admin-password").read_text())
    await b.start()
    yield a, b
    for r in (b, a):
        if r.proc is not None and r.proc.returncode is None:
            await r.kill(signal.SIGTERM)


async def _until(client, url, pred, timeout=HANG_S):
    async def ok():
        r = await client.get(url)
        return r.json() if r.status_code == 200 and pred(r.json()) else None

    return await wait_until(ok, timeout)


async def test_a_command_accepted_by_one_replica_is_sent_by_the_one_holding_the_stream(replicas, unique):
    a, b = replicas
    host_id = f"route-{unique}"
    agent = await a.agent(host_id)
    await agent.connect()
    async with await b.admin() as cb:
        await _until(cb, f"/api/v1/hosts/{host_id}", lambda h: h["online"] and h["catalog_complete"])
        assert (await cb.get(f"/api/v1/hosts/{host_id}")).json()["replica"] == "replica-a"
        r = await cb.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 99})
        assert r.status_code == 202
        done = await _until(cb, f"/api/v1/hosts/{host_id}/commands/{r.json()['id']}", lambda c: c["state"] == "done")
        assert done["result"]["targets"][0]["id"] == "p99-1000"
        assert [c.id for c in agent.commands] == [r.json()["id"]]
        # A quick command through B: B waits, A gets the answer, B wakes up (no polling delay needed).
        fn = (await cb.get(f"/api/v1/hosts/{host_id}/functions", params={"q": "ksys_read"})).json()["items"][0]
        t0 = time.monotonic()
        r = await cb.get(f"/api/v1/hosts/{host_id}/functions/{fn['id']}/instructions")
        assert r.status_code == 200, r.text
        assert [i["text"] for i in r.json()["instructions"]][-1] == "ret" and time.monotonic() - t0 < 10
        audit = (await cb.get("/api/v1/audit", params={"action": "command_sent", "limit": 20})).json()
        assert any(e["actor"] == "replica:replica-a" and e["target"] == host_id for e in audit)
    await agent.close()


async def test_a_websocket_on_another_replica_sees_the_hosts_samples(replicas, unique):
    a, b = replicas
    host_id = f"live-{unique}"
    agent = await a.agent(host_id)
    await agent.connect()
    async with await b.admin() as cb:
        await _until(cb, f"/api/v1/hosts/{host_id}", lambda h: h["catalog_complete"])
        token = cb.headers["Authorization"].split()[1]
    async with connect(b.url.replace("http://", "ws://") + f"/api/v1/ws?token={token}") as ws:
        await ws.send(json.dumps({"type": "subscribe", "topics": [f"host:{host_id}"]}))
        await asyncio.sleep(1.0)  # B's interest reaches A
        seq = 0
        end = time.monotonic() + 20
        got = None
        while got is None and time.monotonic() < end:
            seq = await agent.send_metrics(time.time_ns() - 10**9, [("vmlinux", 0, 0, 9)])
            try:
                while True:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 1.0))
                    if msg["type"] == "samples":
                        got = msg
                        break
            except TimeoutError:
                continue
        assert got is not None and got["host_id"] == host_id and got["top"][0]["name"] == "vfs_read"
        await wait_for_ack(agent, seq)
    await agent.close()


async def test_after_a_backend_restart_the_agent_reconnects_and_its_measurement_continues(data_folder, unique):
    backend = Backend(data_folder)
    await backend.start()
    host_id = f"restart-{unique}"
    agent = await backend.agent(host_id)
    await agent.connect()
    async with await backend.admin() as c:
        await _until(c, f"/api/v1/hosts/{host_id}", lambda h: h["catalog_complete"])
        vmlinux = next(d for n, _b, _f, d in agent.modules if n == "vmlinux")
        r = await c.post(
            f"/api/v1/hosts/{host_id}/measurements",
            json={"resources": [{"digest": vmlinux, "function_index": 0}], "metrics": ["count"]},
        )
        mid = r.json()["params"]["measurement_id"]
        await _until(c, f"/api/v1/hosts/{host_id}/commands/{r.json()['id']}", lambda x: x["state"] == "done")
    now = time.time_ns() // 10**9 * 10**9
    for i in range(3):
        seq = await agent.send_measurement(mid, now - (6 - i) * 10**9, [(0, 10, 0)])
    await wait_for_ack(agent, seq)
    await backend.kill(signal.SIGKILL)
    assert await _postgres_gone(data_folder / "pgdata", 15)
    await backend.start()
    # The agent reconnects: the same instance, its measurement running, the next intervals follow.
    again = ScriptedAgent(agent.target, agent.credentials, host_id, kernel_tag=f"rec-{host_id}")
    again.instance_id, again.seq, again.modules = agent.instance_id, agent.seq, agent.modules
    again.measurements = agent.measurements
    again.measurements[mid].state = pb.MEASUREMENT_STATE_RUNNING
    await again.connect()
    for i in range(3):
        seq = await again.send_measurement(mid, now - (3 - i) * 10**9, [(0, 10, 0)])
    await wait_for_ack(again, seq)
    async with await backend.admin() as c:
        m = (await c.get(f"/api/v1/hosts/{host_id}/measurements/{mid}")).json()
        assert m["state"] == "running"
        values = (await c.get(f"/api/v1/hosts/{host_id}/measurements/{mid}/values", params={"window_s": 60})).json()
        assert values["intervals"] == 6 and values["resources"][0]["values"]["count"] == 60
    await again.close()
    await backend.kill(signal.SIGTERM)
