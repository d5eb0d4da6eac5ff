# SPDX-License-Identifier: Apache-2.0
"""bench/chaos: a real agent streams to a real backend while the backend, then its Postgres, are
killed with SIGKILL and restarted, and a fake agent (backend/tests/scripted_agent.py) sends bad input
alongside the whole time. Measures, from the database and the agent, what was sent, what was stored,
which gaps the console shows, how long each recovery took, and whether any bad row got in.

Last line, exactly: `chaos: B batches sent, B stored, G gaps shown, R s to recover, 0 bad rows stored`
with the measured values (R is the slower of the two recoveries: from the restart of the killed
component until the agent's stream is back and a new batch is stored).
"""

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "backend"))

import grpc  # noqa: E402
import httpx  # noqa: E402
import psycopg  # noqa: E402

from app.core.postmaster import postmaster_pid  # noqa: E402
from app.protocol.proto import pb  # noqa: E402
from tests.scripted_agent import ScriptedAgent, enroll, kernel_functions  # noqa: E402

HTTP = int(os.environ.get("HOTPATH_CHAOS_HTTP_PORT", "8180"))
GRPC = int(os.environ.get("HOTPATH_CHAOS_GRPC_PORT", "50151"))
URL = f"http://127.0.0.1:{HTTP}"
STEADY_S = float(os.environ.get("HOTPATH_CHAOS_STEADY_S", "10"))
DOWN_S = float(os.environ.get("HOTPATH_CHAOS_DOWN_S", "5"))
HOTPATHD = ROOT / "agent" / "build" / "hotpathd"


def say(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Stack:
    def __init__(self, data: Path) -> None:
        self.data = data
        self.backend: subprocess.Popen | None = None
        self.agent: subprocess.Popen | None = None
        self.admin_token = ""

    def start_backend(self) -> None:
        env = dict(
            os.environ,
            HOTPATH_DATA_DIR=str(self.data),
            HOTPATH_HTTP_PORT=str(HTTP),
            HOTPATH_GRPC_PORT=str(GRPC),
            HOTPATH_HTTP_HOST="127.0.0.1",
            HOTPATH_GRPC_HOST="127.0.0.1",
        )
        env.pop("DATABASE_URL", None)
        log = open(self.data / "backend.log", "ab")  # noqa: SIM115 - the child keeps it
        self.backend = subprocess.Popen(
            [str(ROOT / "backend" / ".venv" / "bin" / "python"), "-m", "app"],
            cwd=ROOT / "backend",
            env=env,
            stdout=log,
            stderr=log,
        )

    def health(self) -> int:
        try:
            return httpx.get(f"{URL}/api/v1/health", timeout=2).status_code
        except httpx.HTTPError:
            return 0

    def wait_healthy(self, timeout: float = 120) -> None:
        end = time.monotonic() + timeout
        while self.health() != 200:
            if self.backend is not None and self.backend.poll() is not None:
                raise SystemExit(f"the backend exited; see {self.data / 'backend.log'}")
            if time.monotonic() > end:
                raise SystemExit("the backend did not become healthy")
            time.sleep(0.1)

    def api(self) -> httpx.Client:
        if not self.admin_token:
            password = (self.data / "admin-password").read_text().strip()
            r = httpx.post(f"{URL}/api/v1/auth/login", json={"username": "admin", "password": password})
            self.admin_token = r.json()["access_token"]
        return httpx.Client(base_url=URL, headers={"Authorization": f"Bearer {self.admin_token}"}, timeout=10)

    def new_token(self, note: str) -> dict:
        with self.api() as c:
            return c.post("/api/v1/enrolment-tokens", json={"note": note, "hours": 1}).json()

    def start_agent(self) -> None:
        created = self.new_token("bench/chaos real agent")
        (self.data / "enroll-token").write_text(created["token"])
        (self.data / "enroll-ca.pem").write_text(created["ca_pem"])
        log = open(self.data / "agent.log", "ab")  # noqa: SIM115 - the child keeps it
        self.agent = subprocess.Popen(
            [
                str(HOTPATHD),
                "run",
                "--server",
                f"127.0.0.1:{GRPC}",
                "--state-dir",
                str(self.data / "agent-state"),
                "--enroll-token-file",
                str(self.data / "enroll-token"),
                "--ca-file",
                str(self.data / "enroll-ca.pem"),
            ],
            stdout=log,
            stderr=log,
        )

    def db(self) -> psycopg.Connection:
        """The embedded Postgres, found through its postmaster.pid (port and socket folder)."""
        lines = (self.data / "pgdata" / "postmaster.pid").read_text().split("\n")
        return psycopg.connect(
            host=lines[4], port=int(lines[3]), user="postgres", dbname="postgres", autocommit=True, connect_timeout=3
        )

    def query(self, sql: str, *params):
        for _ in range(50):
            try:
                with self.db() as conn:
                    return conn.execute(sql, params).fetchone()
            except (psycopg.OperationalError, FileNotFoundError, IndexError, ValueError):
                time.sleep(0.2)
        raise SystemExit("the database does not answer")


def host_id() -> str:
    return Path("/etc/machine-id").read_text().strip()


def stored_batches(stack: Stack, hid: str) -> int:
    return stack.query("SELECT count(*) FROM sample_intervals WHERE host_id = %s", hid)[0]


def newest_batch(stack: Stack, hid: str) -> float:
    row = stack.query("SELECT extract(epoch FROM max(ts)) FROM sample_intervals WHERE host_id = %s", hid)
    return float(row[0] or 0)


def wait_recovered(stack: Stack, hid: str, since_epoch: float, timeout: float = 120) -> float:
    """Seconds until the host is online again and a batch newer than since_epoch is stored."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            row = stack.query("SELECT online FROM hosts WHERE id = %s", hid)
            if row and row[0] and newest_batch(stack, hid) > since_epoch:
                return time.monotonic() - t0
        except SystemExit:
            pass
        time.sleep(0.1)
    raise SystemExit(f"no recovery within {timeout} s")


class FakeAgent:
    """Sends bad input over and over on its own (enrolled) host, and once as the real host."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.statuses: dict[str, int] = {}
        self.stop = False
        self.creds = None
        self.fake_id = f"chaos-fake-{os.getpid()}"
        self.digests: set[str] = set()

    async def enrol(self) -> None:
        created = self.stack.new_token("bench/chaos fake agent")
        self.creds = await enroll(f"127.0.0.1:{GRPC + 1}", created["ca_pem"].encode(), self.fake_id, created["token"])

    def attacks(self) -> list:
        real = host_id()
        fns = kernel_functions(20)

        def impersonate(h):
            h.host_id = real

        def nul_hostname(h):
            h.hostname = "evil\x00host"

        def forged_catalog(agent):
            name, _b, f, digest = agent.modules[0]
            forged = [pb.Function() for _ in f]
            for a, b in zip(forged, f, strict=True):
                a.CopyFrom(b)
            forged[2].name = "FAKE_do_not_trust"
            return [
                pb.AgentMessage(
                    catalog_chunk=pb.CatalogChunk(digest=digest, module=name, seq=0, last=True, functions=forged)
                )
            ]

        def future_batch(agent):
            return [
                pb.AgentMessage(
                    seq=1,
                    instance_id=agent.instance_id,
                    metrics=pb.MetricBatch(
                        interval_start_unix_ns=9_200_000_000 * 10**9,
                        interval_ms=1000,
                        total_samples=5,
                        blocks=[pb.BlockSamples(module_index=0, function_index=0, block_offset=0, count=5)],
                    ),
                )
            ]

        def huge_count(agent):
            return [
                pb.AgentMessage(
                    seq=2,
                    instance_id=agent.instance_id,
                    metrics=pb.MetricBatch(
                        interval_start_unix_ns=time.time_ns(),
                        interval_ms=1000,
                        total_samples=(1 << 63),
                        blocks=[pb.BlockSamples(module_index=0, function_index=0, block_offset=0, count=(1 << 63))],
                    ),
                )
            ]

        return [
            (impersonate, None),
            (nul_hostname, None),
            (None, forged_catalog),
            (None, future_batch),
            (None, huge_count),
        ], fns

    async def run(self) -> None:
        attacks, fns = self.attacks()
        i = 0
        while not self.stop:
            hello_edit, messages = attacks[i % len(attacks)]
            i += 1
            agent = ScriptedAgent(
                f"127.0.0.1:{GRPC}",
                self.creds,
                self.fake_id,
                kernel_tag=f"chaos-{i}",
                modules=[("vmlinux", 0xFFFFFFFF81000000, fns)],
            )
            self.digests.add(agent.modules[0][3])
            hello = agent.hello()
            if hello_edit:
                hello_edit(hello)
            code = "no-status"
            try:
                call = agent.open()
                await call.write(pb.AgentMessage(hello=hello))
                if messages:
                    reply = await asyncio.wait_for(call.read(), 10)
                    if reply is not grpc.aio.EOF:
                        for m in messages(agent):
                            await call.write(m)
                    await call.done_writing()
                async with asyncio.timeout(10):
                    while (await call.read()) is not grpc.aio.EOF:
                        pass
                code = "OK"
            except TimeoutError:
                code = "timeout"
            except Exception as exc:  # noqa: BLE001 - record how the stream ended
                code = getattr(exc, "code", lambda: None)()
                code = code.name if code is not None else type(exc).__name__
            finally:
                if agent.channel is not None:
                    await agent.channel.close()
            self.statuses[code] = self.statuses.get(code, 0) + 1
            await asyncio.sleep(0.3)


def bad_rows(stack: Stack, fake: "FakeAgent") -> int:
    """Rows the fake agent's input must never have produced, counted in the database."""
    real = host_id()
    checks = [
        # The series are partitioned (migration 0004_series): one sample_intervals row per host and
        # interval, with its block counts in arrays; the rollups per minute hold what it adds up to.
        (
            "SELECT count(*) FROM sample_intervals WHERE ts > now() + interval '5 minutes' "
            "OR ts < now() - interval '1 day'",
        ),
        (
            "SELECT count(*) FROM sample_blocks_1m WHERE bucket > now() + interval '5 minutes' "
            "OR bucket < now() - interval '1 day'",
        ),
        ("SELECT count(*) FROM sample_intervals WHERE host_id = %s", fake.fake_id),
        ("SELECT count(*) FROM sample_blocks_1m WHERE host_id = %s", fake.fake_id),
        ("SELECT count(*) FROM sample_intervals WHERE total_samples >= %s", 1 << 62),
        ("SELECT count(*) FROM functions WHERE name LIKE 'FAKE%%'",),
        ("SELECT count(*) FROM hosts WHERE hostname LIKE 'evil%%'",),
        ("SELECT count(*) FROM hosts WHERE id = %s AND hostname <> %s", real, socket.gethostname()),
        ("SELECT count(*) FROM catalog_pieces WHERE digest = ANY(%s)", sorted(fake.digests)),
        ("SELECT count(*) FROM host_modules WHERE host_id = %s AND digest = ANY(%s)", real, sorted(fake.digests)),
    ]
    return sum(stack.query(*check)[0] for check in checks)


async def main() -> int:
    if os.geteuid() != 0:
        raise SystemExit("bench/chaos runs the agent, which needs root")
    data = Path(tempfile.mkdtemp(prefix="hotpath-chaos-"))
    stack = Stack(data)
    fake = FakeAgent(stack)
    hid = host_id()
    ok = False
    try:
        say(f"data in {data}; backend on :{HTTP} (agents :{GRPC})")
        stack.start_backend()
        stack.wait_healthy()
        stack.start_agent()
        end = time.monotonic() + 180
        stored_sql = (
            "SELECT count(*) FROM hosts h JOIN host_modules hm ON hm.host_id = h.id "
            "JOIN catalog_pieces cp ON cp.digest = hm.digest AND cp.complete WHERE h.id = %s"
        )
        while not stack.query(stored_sql, hid)[0]:
            if time.monotonic() > end:
                raise SystemExit("the agent's catalog was not stored within 180 s")
            await asyncio.sleep(0.5)
        say("the real agent is connected and its catalog stored; the fake agent starts")
        await fake.enrol()
        fake_task = asyncio.create_task(fake.run())
        await asyncio.sleep(STEADY_S)

        say("kill -9 of the backend")
        before = newest_batch(stack, hid)
        stack.backend.send_signal(signal.SIGKILL)
        stack.backend.wait()
        await asyncio.sleep(DOWN_S)
        say("restarting the backend")
        t_restart = time.time()
        stack.start_backend()
        await asyncio.to_thread(stack.wait_healthy)
        r1 = await asyncio.to_thread(wait_recovered, stack, hid, max(before, t_restart - 1))
        say(f"recovered {r1:.1f} s after the restart")
        await asyncio.sleep(STEADY_S)

        pid = postmaster_pid(data / "pgdata")
        say(f"kill -9 of Postgres (pid {pid})")
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)
        r2 = await asyncio.to_thread(wait_recovered, stack, hid, t_kill)
        say(f"recovered {r2:.1f} s after Postgres was killed (the backend restarts it)")
        await asyncio.sleep(STEADY_S)

        fake.stop = True
        await fake_task
        # Let the agent's outbox drain, then stop it; what it still holds is counted as sent, not stored.
        await asyncio.sleep(3)
        stack.agent.send_signal(signal.SIGTERM)
        stack.agent.wait(15)
        log = (data / "agent.log").read_text(errors="replace")
        kept = re.findall(r"(\d+) unacknowledged data message\(s\) kept", log)
        still_held = int(kept[-1]) if kept else 0
        instances = stack.query("SELECT count(*), coalesce(sum(seq), 0) FROM delivery_marks WHERE host_id = %s", hid)
        sent = int(instances[1]) + still_held
        stored = stored_batches(stack, hid)
        with stack.api() as c:
            timeline = c.get(f"/api/v1/hosts/{hid}/coverage", params={"window_s": 3600}).json()
        gaps = len(timeline["gaps"])
        bad = bad_rows(stack, fake)
        say(f"fake agent streams: {dict(sorted(fake.statuses.items()))}")
        say(f"agent instances: {instances[0]}; batches held by the agent at the end: {still_held}")
        for g in timeline["gaps"]:
            say(f"gap: {g['start']} .. {g['end']}: {g['reason']} ({g['messages']} batches, {g['source']})")
        print(
            f"chaos: {sent} batches sent, {stored} stored, {gaps} gaps shown, {max(r1, r2):.1f} s to recover, "
            f"{bad} bad rows stored",
            flush=True,
        )
        ok = True
        return 0
    finally:
        fake.stop = True
        for proc in (stack.agent, stack.backend):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        pid = postmaster_pid(data / "pgdata")
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        if ok:
            shutil.rmtree(data, ignore_errors=True)
        else:
            say(f"kept {data} (the backend's and agent's logs, the database)")


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
