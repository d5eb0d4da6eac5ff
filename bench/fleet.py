# SPDX-License-Identifier: Apache-2.0
"""bench/fleet: the fleet views of issue 19 over H simulated hosts with an hour of history, on one
backend replica or, with HOTPATH_FLEET_REPLICAS > 1 (bench/fleet --replicas R), on R replicas behind
HAProxy with one of them killed (kill -9) mid-run (see Cluster and bench/fleet's header).

One backend (`python -m app` as `make run` starts it: its embedded Postgres, a data folder of its own)
and H simulated hosts of BUILDS kernel builds (host shares 60/30/10 % for three), each with labels
(role, region, rack). Every host goes through the real ingest path: it is enrolled like an agent (a
one-time token, its own key and certificate), opens a mutual-TLS AgentService stream, says Hello with
its labels and sends the last 60 whole minutes of samples as 60 one-minute MetricBatches of BLOCKS
sampled blocks each (drawn from the host's own set of hot blocks, so an hour holds a few hundred
distinct blocks per host, as decisions' fleet section expects of a kernel), then waits for the
acknowledgement of its last batch, which the backend sends once everything is stored. One-minute
batches, not one-second ones: the fleet views read only the minute and hour rollups, whose rows are
the same whatever the batch length for the same blocks per minute, and 3.6 million one-second batches
(an hour of 1,000 hosts) would take this machine hours to store through one backend process. The
stored rate P counts block points (one block's count in one batch) acknowledged per second of the
storing phase, HOSTS_AT_ONCE streams at a time. Most of the hour lies below the minute watermark, so the
ingest writer sums those batches into the rollups in its own transaction; the rollup task sums the last
minutes once the watermark passes them.

Then, once the rollups cover the hour (the hot code answer says which rollups it read: the state the
bench waits for, bounded as a hang), it checks that the biggest group's busy samples in the answer
equal what its hosts sent, and asks, one request at a time as a console does, N times each: the groups
list, the biggest group's hot code over that hour (the console's default range, the last hour; unless
it starts on the hour no whole clock hour fits in it, so it is read from the minute rollups: the
heaviest case of an hour), and the same narrowed by the label role=db; with stacks (HOTPATH_FLEET_STACKS,
default on: each batch's blocks also sent as call stacks, the block's function called through one of eight
caller chains of its build, so a host's hour holds a few hundred distinct stacks) also the biggest group's
flame graph over the hour (read from the build's stack rollup, which the bench checks), the same narrowed by
role=db, and its compare views (the hour's first half against its second, the whole group; rack r00 against
the other hosts), after checking that the flame graph's samples equal the stack samples its hosts sent. It
prints each view's p50/p99 and, for the flame graphs, which rollups answered (a label narrowing the group is
read from its hosts' own).
Last line, exactly:
    fleet: H hosts, P points/s stored by R replicas, fleet view p99 X ms, failover Y s, lost Z
X over every request of the views (three, or seven with stacks). With one replica failover and lost cannot
be measured: they are "unavailable" and the reason follows the line's figures after "; unavailable: ".
With R replicas, Y is the time from the kill until the last stream it cut was welcomed by another
replica, Z the block points sent minus those stored (points stored twice end the run with an error).
Ports: HOTPATH_FLEET_HTTP_PORT (8380) and HOTPATH_FLEET_GRPC_PORT (50351, enrolment on the next).
"""

import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "backend"))

import grpc  # noqa: E402
import httpx  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from app.core.db import start_embedded_postgres, stop_embedded_postgres  # noqa: E402
from app.protocol.catalog_digest import piece_digest  # noqa: E402
from app.protocol.proto import pb, pb_grpc  # noqa: E402
from app.protocol.stack_defs import stack_id  # noqa: E402
from tests.scripted_agent import enroll, kernel_functions  # noqa: E402

HTTP = int(os.environ.get("HOTPATH_FLEET_HTTP_PORT", "8380"))
GRPC = int(os.environ.get("HOTPATH_FLEET_GRPC_PORT", "50351"))
URL = f"http://127.0.0.1:{HTTP}"
HOSTS = int(os.environ.get("HOTPATH_FLEET_HOSTS", "1000"))
BLOCKS = int(os.environ.get("HOTPATH_FLEET_BLOCKS", "200"))  # sampled blocks per host and minute
HOT_BLOCKS = 4 * BLOCKS  # a host's set of hot blocks, which its minutes draw from
REQUESTS = int(os.environ.get("HOTPATH_FLEET_REQUESTS", "100"))
FUNCTIONS = int(os.environ.get("HOTPATH_FLEET_FUNCTIONS", "5000"))  # per kernel build
STACKS = os.environ.get("HOTPATH_FLEET_STACKS", "1") != "0"  # blocks also sent as call stacks
HOSTS_AT_ONCE = 32  # hosts enrolling or storing at the same time
REPLICAS = int(os.environ.get("HOTPATH_FLEET_REPLICAS", "1"))
STREAMS_PER_SOURCE = max(100, 2 * HOSTS_AT_ONCE)  # every simulated host connects from 127.0.0.1
SHARES = (0.6, 0.3, 0.1)  # the kernel builds' shares of the hosts
MINUTES = 60
HANG_S = 600.0  # a bound for what is bound to happen (the rollups covering the hour), not a speed check
KERNEL_BASE = 0xFFFFFFFF81000000
ROLES = ("db", "web", "cache")


def say(msg: str) -> None:
    print(f"[fleet {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


class Build:
    """One kernel build: its functions and catalog digest."""

    def __init__(self, n: int) -> None:
        self.build_id = f"{n + 1:02x}" * 20
        self.release = f"6.18.{n}-fleet"
        self.functions = kernel_functions(FUNCTIONS)
        self.digest = piece_digest(self.build_id, "vmlinux", KERNEL_BASE, self.functions)
        self.blocks = sum(len(f.blocks) for f in self.functions)
        # Eight caller chains (leaf's caller first) of 3 to 8 of the build's first 50 functions: a stack is a
        # sampled block's function called through the chain its function index picks.
        rng = random.Random(n)
        self.chains = [[rng.randrange(min(50, FUNCTIONS)) for _ in range(rng.randint(3, 8))] for _ in range(8)]


class Host:
    """One simulated host: labels, its hot blocks, one stream while it stores its hour."""

    def __init__(self, n: int, build: Build) -> None:
        self.n = n
        self.build = build
        self.host_id = f"fleet-{n:04d}-{uuid.uuid4().hex[:6]}"
        self.labels = {"role": ROLES[n % 3], "region": ("eu", "us")[n % 2], "rack": f"r{n % 20:02d}"}
        self.creds = None
        rng = random.Random(n)
        # Hot blocks: (function index, block offset), skewed towards the kernel's first functions as
        # real profiles are (a few functions take most samples).
        hot: set[tuple[int, int]] = set()
        while len(hot) < HOT_BLOCKS:
            fi = int(FUNCTIONS * rng.random() ** 3)  # a cube: a quarter of them in the first 1.6 %
            hot.add((fi, rng.choice((0, 0x10, 0x20))))
        self.hot = sorted(hot)
        self.rng = rng
        self.busy = 0  # non-idle samples sent
        self.stacked = 0  # samples sent with a stack
        self.defined: set[int] = set()  # stack ids whose frames a batch carried
        self.points = 0
        self.instance = uuid.uuid4().hex  # one agent instance: batches sent again keep their sequence numbers
        self.cut_at: float | None = None  # when its stream was cut by the kill (failover runs)
        self.back_at: float | None = None  # when it was welcomed again after that

    def hello(self) -> "pb.Hello":
        b = self.build
        return pb.Hello(
            host_id=self.host_id,
            hostname=self.host_id,
            kernel_release=b.release,
            kernel_build_id=b.build_id,
            cpu_model="bench",
            cpu_count=2,
            agent_version="bench",
            metric_interval_ms=60_000,
            sample_frequency_hz=997,
            sample_event="cpu-clock",
            instance_id=self.instance,
            clock_unix_ns=time.time_ns(),
            modules=[
                pb.ModuleRef(
                    name="vmlinux",
                    digest=b.digest,
                    base_address=KERNEL_BASE,
                    function_count=len(b.functions),
                    block_count=b.blocks,
                    build_id=b.build_id,
                )
            ],
            targets=[pb.Target(id="kernel", kind=pb.TARGET_KIND_KERNEL, state=pb.TARGET_STATE_ATTACHED)],
            labels=[pb.Label(key=k, value=v) for k, v in self.labels.items()],
        )

    def batch(self, start: datetime) -> "pb.MetricBatch":
        b = pb.MetricBatch(
            interval_start_unix_ns=int(start.timestamp()) * 10**9, interval_ms=60_000, idle_by_context=True
        )
        total = 0
        sampled = []
        for fi, off in self.rng.sample(self.hot, BLOCKS):
            c = self.rng.randint(1, 400)
            b.blocks.add(module_index=0, function_index=fi, block_offset=off, count=c)
            total += c
            sampled.append((fi, off, c))
        if STACKS:
            self.stacks(b, sampled)
        b.total_samples = total + 100  # and 100 user samples
        b.user_samples = 100
        self.busy += total + 100
        self.points += BLOCKS
        return b

    def stacks(self, b: "pb.MetricBatch", sampled: list[tuple[int, int, int]]) -> None:
        """The batch's blocks as call stacks too (their samples, so no more than the batch's total): the
        block's function (at an instruction of the block) called through its build's caller chain, in one of
        five processes; a stack's frames travel in the first batch that samples it, as an agent sends them."""
        st = b.stacks
        st.modules.add(kind=pb.FRAME_KIND_KERNEL_FUNCTION, digest=self.build.digest, name="vmlinux")
        st.comms.extend(f"worker{k}" for k in range(5))
        st.max_depth = 64
        for fi, off, c in sampled:
            frames = [(fi, off + 2)] + [(caller, 0x8) for caller in self.build.chains[fi % 8]]
            sid = stack_id((1, self.build.digest, f, o) for f, o in frames)
            if sid not in self.defined:
                self.defined.add(sid)
                st.stacks.add(id=sid, frames=[pb.Frame(module=0, function_index=f, offset=o) for f, o in frames])
            st.counts.add(stack_id=sid, pid=1000 + fi % 5, comm=fi % 5, cpu=fi % 2, count=c)
            st.stack_samples += c
        self.stacked += st.stack_samples

    def channel(self) -> grpc.aio.Channel:
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.creds.ca_pem, private_key=self.creds.key_pem, certificate_chain=self.creds.cert_pem
        )
        return grpc.aio.secure_channel(f"127.0.0.1:{GRPC}", creds)

    async def upload_catalog(self) -> None:
        """Connect, say Hello, upload the build's catalog if the backend asks for it, close."""
        async with self.channel() as channel:
            call = pb_grpc.AgentServiceStub(channel).Connect()
            await call.write(pb.AgentMessage(hello=self.hello()))
            welcome = await call.read()
            if welcome is grpc.aio.EOF or welcome.WhichOneof("kind") != "welcome":
                raise SystemExit(f"{self.host_id}: no Welcome: {welcome}")
            fns = self.build.functions
            if welcome.welcome.missing_digests:
                for i in range(0, len(fns), 2000):
                    chunk = pb.CatalogChunk(
                        digest=self.build.digest,
                        module="vmlinux",
                        seq=i // 2000,
                        last=i + 2000 >= len(fns),
                        functions=fns[i : i + 2000],
                    )
                    await call.write(pb.AgentMessage(catalog_chunk=chunk))
            await call.done_writing()
            while await call.read() is not grpc.aio.EOF:
                pass

    async def store_hour(self, hour: datetime, welcomed: "asyncio.Event | None" = None) -> None:
        """Send the hour as an agent does: connect, say Hello, send every batch not acknowledged yet, read
        acknowledgements until the last one's. When the stream is cut (a replica killed under it, in a
        failover run), reconnect with the agent's backoff (0.5 s doubling to 4 s, each wait drawn between
        half and all of it) and send again what was not acknowledged, under the same sequence numbers."""
        batches = []
        for m in range(MINUTES):
            msg = pb.AgentMessage(seq=m + 1, instance_id=self.instance)
            msg.metrics.CopyFrom(self.batch(hour + timedelta(minutes=m)))
            batches.append(msg)
        acked, backoff = 0, 0.5
        while True:
            try:
                async with self.channel() as channel:
                    call = pb_grpc.AgentServiceStub(channel).Connect()
                    await call.write(pb.AgentMessage(hello=self.hello()))
                    welcome = await call.read()
                    if welcome is grpc.aio.EOF or welcome.WhichOneof("kind") != "welcome":
                        raise ConnectionError(f"no Welcome: {welcome}")
                    if self.cut_at is not None and self.back_at is None:
                        self.back_at = time.monotonic()
                    if welcomed is not None:
                        welcomed.set()
                    for msg in batches[acked:]:
                        await call.write(msg)
                    while acked < MINUTES:
                        msg = await call.read()
                        if msg is grpc.aio.EOF:
                            raise ConnectionError("the stream ended before the last acknowledgement")
                        if msg.WhichOneof("kind") == "ack" and msg.ack.instance_id == self.instance:
                            acked = max(acked, msg.ack.seq)
                    await call.done_writing()
                    return
            except (grpc.aio.AioRpcError, ConnectionError, asyncio.InvalidStateError) as exc:  # (a write after the end)
                if not KILLED.is_set():
                    raise SystemExit(f"{self.host_id}: {exc}") from None
                if self.cut_at is None:
                    self.cut_at = time.monotonic()
                await asyncio.sleep(random.uniform(backoff / 2, backoff))
                backoff = min(2 * backoff, 4.0)


KILLED = asyncio.Event()  # set the moment a replica is killed: from then on a cut stream reconnects


async def in_parallel(items, job, at_once: int) -> None:
    queue = list(items)
    queue.reverse()

    async def worker() -> None:
        while queue:
            await job(queue.pop())

    await asyncio.gather(*(worker() for _ in range(at_once)))


def timed(client: httpx.Client, path: str, params) -> tuple[float, dict]:
    t0 = time.perf_counter()
    r = client.get(path, params=params)
    dt = (time.perf_counter() - t0) * 1000
    if r.status_code != 200:
        raise SystemExit(f"GET {path} {params}: {r.status_code} {r.text[:300]}")
    return dt, r.json()


class Cluster:
    """The backend: one `python -m app` as `make run` starts it (its embedded Postgres, a data folder of its
    own) or, with REPLICAS > 1, that many replicas on one embedded Postgres and one shared data folder behind
    HAProxy (deploy/haproxy_config.py), the balancer on the bench's ports and replica i on HTTP + 1 + i
    (HTTP) and GRPC + 2 + 2i, GRPC + 3 + 2i (agents, enrolment)."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.names = [chr(ord("a") + i) for i in range(REPLICAS)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.pg: Any = None
        self.db_url = ""

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        with open(self.data / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(args, cwd=ROOT / "backend", env=env, stdout=log, stderr=log)

    def _env(self, http: int, grpc_port: int, enroll: int) -> dict[str, str]:
        env = dict(
            os.environ,
            HOTPATH_DATA_DIR=str(self.data / "data"),
            HOTPATH_HTTP_PORT=str(http),
            HOTPATH_GRPC_PORT=str(grpc_port),
            HOTPATH_ENROLL_PORT=str(enroll),
            HOTPATH_HTTP_HOST="127.0.0.1",
            HOTPATH_GRPC_HOST="127.0.0.1",
            HOTPATH_LOG_LEVEL="WARNING",
            HOTPATH_AGENT_STREAMS_PER_PEER=str(STREAMS_PER_SOURCE if REPLICAS == 1 else 100_000),
        )
        env.pop("DATABASE_URL", None)
        return env

    def _wait(self, what: str, ok) -> None:
        end = time.monotonic() + HANG_S
        while True:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise SystemExit(f"{name} exited; see {self.data / (name + '.log')}")
            try:
                if ok():
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > end:
                raise SystemExit(f"{what}: not within {HANG_S:.0f} s")
            time.sleep(0.2)

    def start(self) -> None:
        (self.data / "data").mkdir()
        if REPLICAS == 1:
            self._spawn("backend", [sys.executable, "-m", "app"], self._env(HTTP, GRPC, GRPC + 1))
        else:
            self.pg, server_url = start_embedded_postgres(self.data / "pgdata")
            url = make_url(server_url)
            admin = create_engine(url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text('CREATE DATABASE "hotpath_fleet"'))
            admin.dispose()
            self.db_url = url.set(database="hotpath_fleet").render_as_string(hide_password=False)
            servers = []
            for i, name in enumerate(self.names):  # all at once, on one fresh folder and database
                ports = (HTTP + 1 + i, GRPC + 2 + 2 * i, GRPC + 3 + 2 * i)
                env = self._env(*ports)
                env.update(DATABASE_URL=self.db_url, HOTPATH_REPLICA_ID=f"replica-{name}")
                self._spawn(name, [sys.executable, "-m", "app"], env)
                servers.append(f"--replica={name}=127.0.0.1:{ports[0]}:{ports[1]}:{ports[2]}")
            cfg = subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "deploy" / "haproxy_config.py"),
                    *servers,
                    f"--http-bind=127.0.0.1:{HTTP}",
                    f"--grpc-bind=127.0.0.1:{GRPC}",
                    f"--enroll-bind=127.0.0.1:{GRPC + 1}",
                    f"--streams-per-source={STREAMS_PER_SOURCE}",
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            (self.data / "haproxy.cfg").write_text(cfg)
            self._spawn("haproxy", ["haproxy", "-db", "-f", str(self.data / "haproxy.cfg")])
            for i, name in enumerate(self.names):
                self._wait(
                    f"replica {name} healthy",
                    lambda i=i: (
                        httpx.get(f"http://127.0.0.1:{HTTP + 1 + i}/api/v1/health", timeout=2).status_code == 200
                    ),
                )
        seen: set[str] = set()

        def balanced() -> bool:
            r = httpx.get(f"{URL}/api/v1/health", timeout=2)
            if r.status_code == 200 and REPLICAS > 1:
                seen.add(r.headers["x-hotpath-replica"])  # the balancer sends traffic to every replica
            return r.status_code == 200 and (REPLICAS == 1 or len(seen) == REPLICAS)

        self._wait("the backend answering", lambda: balanced() and (self.data / "data" / "admin-password").exists())

    def describe(self) -> str:
        if REPLICAS == 1:
            return f"backend pid {self.procs['backend'].pid}"
        pids = ", ".join(f"{n} {self.procs[n].pid}" for n in self.names)
        return f"{REPLICAS} replicas (pids {pids}) behind HAProxy (pid {self.procs['haproxy'].pid})"

    def kill_first(self) -> float:
        """kill -9 the first replica; returns the moment (time.monotonic)."""
        proc = self.procs[self.names[0]]
        proc.kill()
        t = time.monotonic()
        proc.wait()
        return t

    def stored_points(self) -> int:
        engine = create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                return int(
                    conn.execute(
                        text("SELECT coalesce(sum(cardinality(counts)), 0) FROM sample_intervals")
                    ).scalar_one()
                )
        finally:
            engine.dispose()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.pg is not None:
            stop_embedded_postgres(self.pg)


async def main() -> None:
    data = Path(tempfile.mkdtemp(prefix="hotpath-fleet-"))
    cluster = Cluster(data)
    ok = False
    try:
        cluster.start()
        password = (data / "data" / "admin-password").read_text().strip()
        login = {"username": "admin", "password": password}
        token = httpx.post(f"{URL}/api/v1/auth/login", json=login).json()["access_token"]  # noqa: ASYNC210
        headers = {"Authorization": f"Bearer {token}"}
        api = httpx.AsyncClient(base_url=URL, headers=headers, timeout=60)
        ca = (data / "data" / "tls" / "ca.pem").read_bytes()

        builds = [Build(i) for i in range(len(SHARES))]
        if HOSTS < 10:
            raise SystemExit("HOTPATH_FLEET_HOSTS: at least 10, so that every kernel build has a host")
        hosts: list[Host] = []
        edge = 0.0
        for i, share in enumerate(SHARES):
            edge += share
            hosts += [Host(n, builds[i]) for n in range(len(hosts), round(HOSTS * edge))]
        say(
            f"{cluster.describe()}, data {data}; {len(hosts)} hosts of {len(builds)} kernel builds "
            f"({', '.join(str(sum(h.build is b for h in hosts)) for b in builds)} hosts), {FUNCTIONS} functions "
            f"each; {MINUTES} one-minute batches of {BLOCKS} blocks per host (from {HOT_BLOCKS} hot blocks)"
        )

        t0 = time.monotonic()

        async def enrol(h: Host) -> None:
            # As an agent does, once more after a failed attempt (on this loaded machine an Enroll call was
            # once cancelled); a fresh one-time token each time.
            for attempt in range(3):
                r = await api.post("/api/v1/enrolment-tokens", json={"note": "bench/fleet", "hours": 1})
                r.raise_for_status()
                try:
                    h.creds = await enroll(f"127.0.0.1:{GRPC + 1}", ca, h.host_id, r.json()["token"])
                    return
                except grpc.aio.AioRpcError as exc:
                    say(f"{h.host_id}: enrolment failed ({exc.code().name}), attempt {attempt + 1} of 3")
            raise SystemExit(f"{h.host_id}: not enrolled after 3 attempts")

        await in_parallel(hosts, enrol, HOSTS_AT_ONCE)
        say(f"{len(hosts)} hosts enrolled in {time.monotonic() - t0:.0f} s")

        # Each build's catalog once, from its first host, before any host sends samples (samples of a piece
        # not stored yet are dropped).
        for b in builds:
            await next(h for h in hosts if h.build is b).upload_catalog()
        firsts = [next(h for h in hosts if h.build is b) for b in builds]
        for _ in range(int(HANG_S)):
            done = [(await api.get(f"/api/v1/hosts/{h.host_id}")).json() for h in firsts]
            if all(d["catalog_complete"] for d in done):
                break
            await asyncio.sleep(1)
        else:
            raise SystemExit("the kernel builds' catalogs were not stored")

        # The hour: the last 60 whole minutes, as the console's default range (the last hour) would show them;
        # unless it starts on the hour, the views read it from the minute rollups.
        hour = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
        t0 = time.monotonic()
        stored = [0]

        welcomes = [asyncio.Event() for _ in hosts]

        async def store(h: Host) -> None:
            await h.store_hour(hour, welcomes[h.n])
            stored[0] += 1
            if stored[0] % 100 == 0:
                say(f"{stored[0]} hosts stored their hour ({time.monotonic() - t0:.0f} s)")

        async def kill_one() -> float:
            # Mid-run: once half the hosts have been welcomed, HOSTS_AT_ONCE streams are open on the replicas.
            for e in welcomes[: len(hosts) // 2]:
                await e.wait()
            KILLED.set()
            return cluster.kill_first()

        killer = asyncio.ensure_future(kill_one()) if REPLICAS > 1 else None
        await in_parallel(hosts, store, HOSTS_AT_ONCE)
        took = time.monotonic() - t0
        failover = "failover unavailable"
        lost = "lost unavailable"
        unavailable = (
            "failover and lost need two or more replicas behind a load balancer (--replicas 2), and this run has one"
        )
        if killer is not None:
            t_kill = await killer
            cut = [h for h in hosts if h.cut_at is not None]
            if any(h.back_at is None for h in cut):
                raise SystemExit("a host whose stream was cut stored its hour without being welcomed again")
            stored_points = cluster.stored_points()
            sent_points = sum(h.points for h in hosts)
            if stored_points > sent_points:
                raise SystemExit(f"{stored_points - sent_points} block points stored twice")
            lost = f"lost {sent_points - stored_points}"
            if cut:
                worst = max(h.back_at - t_kill for h in cut if h.back_at is not None)
                failover = f"failover {worst:.1f}"
                unavailable = ""
                say(
                    f"killed replica {cluster.names[0]} (kill -9) {t_kill - t0:.1f} s into the storing phase: "
                    f"{len(cut)} streams cut, all welcomed again by the others, the last {worst:.2f} s after the kill; "
                    f"{stored_points:,} of {sent_points:,} block points stored"
                )
            else:
                unavailable = f"no stream was on replica {cluster.names[0]} when it was killed"
                say(f"{lost}; {unavailable}")
        points = sum(h.points for h in hosts)
        rate = points / took
        say(
            f"stored {points:,} block points ({len(hosts) * MINUTES:,} batches) of the hour {hour:%H:%M} UTC in "
            f"{took:.0f} s: {rate:,.0f} points/s"
        )
        await api.aclose()

        # Blocking requests, one at a time, as a console asks: nothing else runs on this loop any more.
        with httpx.Client(base_url=URL, headers=headers, timeout=120) as client:
            groups = timed(client, "/api/v1/fleet/groups", {"limit": 50})[1]["items"]
            biggest = max(groups, key=lambda g: g["host_count"])
            big_build = next(b for b in builds if b.build_id == biggest["kernel_build_id"])
            span = {"from": hour.isoformat(), "to": (hour + timedelta(hours=1)).isoformat()}
            hot_path = f"/api/v1/fleet/groups/{biggest['id']}/hot-code"
            # Wait until the rollups cover the hour: the writer summed the batches below the minute watermark into
            # the rollups as it stored them, the rollup task sums the rest once the watermark passes them.
            t_wait = time.monotonic()
            while True:
                answer = timed(client, hot_path, span)[1]
                if answer["covered_to"] and datetime.fromisoformat(answer["covered_to"]) >= hour + timedelta(hours=1):
                    break
                if time.monotonic() - t_wait > HANG_S:
                    raise SystemExit(f"the rollups did not cover the hour: {answer['rollups']}")
                await asyncio.sleep(2)
            sent = sum(h.busy for h in hosts if h.build is big_build)
            shown = sum(h["busy_samples"] for h in answer["hosts"])
            say(
                f"biggest group: {biggest['host_count']} hosts; busy samples in its hot code {shown:,}, sent {sent:,}; "
                f"{answer['functions']} functions"
            )
            if shown != sent or len(answer["hosts"]) != biggest["host_count"]:
                raise SystemExit("the hot code's busy samples differ from what the group's hosts sent")

            views = {
                "groups list": ("/api/v1/fleet/groups", {"limit": 50}),
                "hot code, the hour": (hot_path, span),
                "hot code, role=db": (hot_path, {**span, "label": "role=db"}),
            }
            if STACKS:
                flame_path = f"/api/v1/fleet/groups/{biggest['id']}/flamegraph"
                dt, flame = timed(client, flame_path, span)
                sent = sum(h.stacked for h in hosts if h.build is big_build)
                say(
                    f"biggest group's flame graph: {flame['samples']:,} samples with a stack, sent {sent:,}; "
                    f"{len(flame['nodes']['frame']):,} nodes, {len(flame['frames']):,} frames "
                    f"(first answer {dt:.0f} ms)"
                )
                if flame["samples"] != sent or flame["undefined_samples"]:
                    raise SystemExit("the flame graph's samples differ from the stack samples the group's hosts sent")
                if flame["rollup"] != "group":
                    raise SystemExit(f"the whole group's flame graph was read from the {flame['rollup']} rollups")
                half = (hour + timedelta(minutes=30)).isoformat()
                views["flame graph, the hour"] = (flame_path, span)
                views["flame graph, role=db"] = (flame_path, {**span, "label": "role=db"})
                views["compare, first half hour against the second"] = (
                    f"{flame_path}/diff",
                    {"a_from": span["from"], "a_to": half, "b_from": half, "b_to": span["to"]},
                )
                views["compare, rack r00 against the others"] = (
                    f"{flame_path}/diff",
                    {**span, "a_label": "rack=r00", "b_without": "rack=r00"},
                )
            all_ms: list[float] = []
            for name, (path, params) in views.items():
                answers = [timed(client, path, params) for _ in range(REQUESTS)]
                lat = [dt for dt, _ in answers]
                all_ms += lat
                p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
                last = answers[-1][1]
                # A flame graph says which rollups it summed (a compare, each side's): the build's, or each host's.
                how = ""
                if "rollup" in last:
                    how = f"; read from the {last['rollup']} rollups"
                elif "a" in last:
                    how = f"; sides read from the {last['a']['rollup']} and {last['b']['rollup']} rollups"
                say(f"{name}: p50 {p50:.0f} ms, p99 {p99:.0f} ms ({len(lat)} requests{how})")
        p99 = percentile(all_ms, 0.99)
        figures = failover + (" s" if failover[-1].isdigit() else "")
        print(
            f"fleet: {len(hosts)} hosts, {rate:.0f} points/s stored by {REPLICAS} replicas, "
            f"fleet view p99 {p99:.0f} ms, {figures}, {lost}" + (f"; unavailable: {unavailable}" if unavailable else "")
        )
        ok = True
    finally:
        cluster.stop()
        _leave(data, ok)


def _leave(data: Path, ok: bool) -> None:
    """Remove the run's folder (its database is gigabytes at 1,000 hosts), or keep it, with the logs, after a
    failure."""
    if ok:
        shutil.rmtree(data, ignore_errors=True)
    else:
        say(f"kept {data} (the backend's log, its database)")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup: stop the backend
    asyncio.run(main())
