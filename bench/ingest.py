# SPDX-License-Identifier: Apache-2.0
"""bench/ingest: how many series points one backend process stores while its REST API stays
responsive.

One backend (`python -m app`, its embedded Postgres, a data folder of its own) and N simulated hosts:
each is enrolled like a real agent (a one-time token, its own key and certificate, mutual TLS), opens a
real AgentService stream, says Hello (one shared kernel build: its catalog is stored once) and sends
one MetricBatch per second of BLOCKS distinct sampled blocks (a busy 2-CPU host at 997 Hz hits about
that many), each with its sample context as today's agent sends it (a share of idle-task blocks,
per-instruction counts of every block) and its call stacks (STACKS stack rows per interval, their
definitions sent the first time a host uses them), plus, on every fourth host, one MeasurementBatch of
MEASURE_ROWS rows — the realistic mix of an agent. A point is one stored value: a block count of a
sample interval, or a value of a measurement row; the instruction counts and stack rows stored with
them are extra work the figure does not count. Meanwhile a separate process asks the REST API what the
console asks (the host list, a host's top functions, its timeline, a function search) REST_RATE times a
second and records each answer's latency.

N grows in steps (HOTPATH_INGEST_STEPS); each step runs WARM_S seconds, then measures MEASURE_S
seconds: points acknowledged (an agent's batch is acknowledged only once stored) per second, the
backend process's CPU (user + system, from /proc), Postgres's CPU, and the REST p50/p99. The knee is
the largest N whose stored rate is at least 95 % of what the hosts sent and whose REST p99 is under
200 ms. Last line, exactly:
    ingest: P points/s stored by one backend process, knee at N hosts, REST p99 X ms
Ports: HOTPATH_INGEST_HTTP_PORT (8280) and HOTPATH_INGEST_GRPC_PORT (50251, enrolment on the next).
"""

import asyncio
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "backend"))

import grpc  # noqa: E402
import httpx  # noqa: E402

from app.protocol.catalog_digest import piece_digest  # noqa: E402
from app.protocol.proto import pb, pb_grpc  # noqa: E402
from app.protocol.stack_defs import stack_id  # noqa: E402
from tests.process_cpu import postgres_cpu, process_cpu  # noqa: E402
from tests.scripted_agent import enroll, kernel_functions  # noqa: E402

HTTP = int(os.environ.get("HOTPATH_INGEST_HTTP_PORT", "8280"))
GRPC = int(os.environ.get("HOTPATH_INGEST_GRPC_PORT", "50251"))
URL = f"http://127.0.0.1:{HTTP}"
STEPS = [int(x) for x in os.environ.get("HOTPATH_INGEST_STEPS", "10,20,40,60,80,100,130,160,200").split(",")]
WARM_S = float(os.environ.get("HOTPATH_INGEST_WARM_S", "6"))
MEASURE_S = float(os.environ.get("HOTPATH_INGEST_MEASURE_S", "15"))
BLOCKS = int(os.environ.get("HOTPATH_INGEST_BLOCKS", "1000"))
STACKS = int(os.environ.get("HOTPATH_INGEST_STACKS", "200"))  # stack rows per interval (0: none)
FUNCTIONS = 20000
MEASURE_ROWS = 32
REST_RATE = float(os.environ.get("HOTPATH_INGEST_REST_RATE", "10"))
KERNEL_BASE = 0xFFFFFFFF81000000
BUILD_ID = "b5" * 20


def say(msg: str) -> None:
    print(f"[ingest {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Host:
    """One simulated agent: enrolled, one stream, one batch a second."""

    def __init__(self, n: int, creds, functions, digest: str) -> None:
        self.host_id = f"ingest-{n:04d}-{uuid.uuid4().hex[:6]}"
        self.n = n
        self.creds = creds
        self.instance = uuid.uuid4().hex
        self.seq = 0
        self.sent: dict[int, int] = {}  # seq -> points
        self.acked_points = 0
        self.acked_seq = 0
        self.channel = None
        self.call = None
        self.reader: asyncio.Task | None = None
        self.measuring = n % 4 == 0
        rng = random.Random(n)
        self.templates = []
        # A pool of call stacks (leaf, caller, entry): STACKS of them appear in each interval.
        pool = []
        for _ in range(max(1, STACKS) * 3):
            fns = [rng.randrange(FUNCTIONS) for _ in range(rng.randint(3, 12))]
            frames = [(f, 0x4 if k else rng.choice((0x4, 0x14, 0x24))) for k, f in enumerate(fns)]
            sid = stack_id((1, digest, f, off) for f, off in frames)
            pool.append(
                pb.Stack(id=sid, frames=[pb.Frame(module=0, function_index=f, offset=off) for f, off in frames])
            )
        self.defined: set[int] = set()
        for _ in range(8):
            b = pb.MetricBatch(interval_ms=1000, idle_by_context=True)
            seen = set()
            while len(seen) < BLOCKS:
                seen.add((min(FUNCTIONS - 1, int(rng.paretovariate(0.8)) * 7 % FUNCTIONS), rng.choice((0, 0x10, 0x20))))
            total = idle = 0
            for fi, off in seen:
                c = rng.randint(1, 20)
                total += c
                is_idle = rng.random() < 0.05
                idle += c if is_idle else 0
                first = rng.randint(1, c)  # samples spread over up to two instructions of the block
                offsets, counts = ([0, 4], [first, c - first]) if first < c else ([0], [c])
                b.blocks.add(
                    module_index=0,
                    function_index=fi,
                    block_offset=off,
                    count=c,
                    idle=is_idle,
                    instruction_offsets=offsets,
                    instruction_counts=counts,
                )
            b.total_samples = total + 50
            b.user_samples = 50
            b.idle_samples = idle
            stacks = rng.sample(pool, STACKS) if STACKS else []
            self.templates.append((b, stacks))
        self.digest = digest
        self.functions = functions

    async def connect(self, digest: str) -> None:
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.creds.ca_pem, private_key=self.creds.key_pem, certificate_chain=self.creds.cert_pem
        )
        self.channel = grpc.aio.secure_channel(f"127.0.0.1:{GRPC}", creds)
        self.call = pb_grpc.AgentServiceStub(self.channel).Connect()
        fns = self.functions
        await self.call.write(
            pb.AgentMessage(
                hello=pb.Hello(
                    host_id=self.host_id,
                    hostname=self.host_id,
                    kernel_release="6.18.0-bench",
                    kernel_build_id=BUILD_ID,
                    cpu_model="bench",
                    cpu_count=2,
                    agent_version="bench",
                    metric_interval_ms=1000,
                    sample_frequency_hz=997,
                    sample_event="cpu-clock",
                    instance_id=self.instance,
                    clock_unix_ns=time.time_ns(),
                    modules=[
                        pb.ModuleRef(
                            name="vmlinux",
                            digest=digest,
                            base_address=KERNEL_BASE,
                            function_count=len(fns),
                            block_count=sum(len(f.blocks) for f in fns),
                            build_id=BUILD_ID,
                        )
                    ],
                    targets=[pb.Target(id="kernel", kind=pb.TARGET_KIND_KERNEL, state=pb.TARGET_STATE_ATTACHED)],
                    measurements=[self.measurement_info(digest)] if self.measuring else [],
                )
            )
        )
        welcome = await self.call.read()
        if welcome is grpc.aio.EOF:
            raise SystemExit(f"{self.host_id}: the stream ended before Welcome")
        if welcome.welcome.missing_digests:
            for i in range(0, len(fns), 2000):
                await self.call.write(
                    pb.AgentMessage(
                        catalog_chunk=pb.CatalogChunk(
                            digest=digest,
                            module="vmlinux",
                            seq=i // 2000,
                            last=i + 2000 >= len(fns),
                            functions=fns[i : i + 2000],
                        )
                    )
                )
        self.reader = asyncio.create_task(self.read_acks())

    def measurement_info(self, digest: str) -> "pb.MeasurementInfo":
        plans = [
            pb.MetricPlan(
                metric=pb.METRIC_COUNT, available=True, label=pb.VALUE_LABEL_EXACT, mechanism="fentry", unit="calls"
            ),
            pb.MetricPlan(
                metric=pb.METRIC_WALL_NS,
                available=True,
                label=pb.VALUE_LABEL_EXACT,
                mechanism="fentry+fexit",
                unit="ns",
            ),
        ]
        rows = [
            pb.MeasuredResource(
                digest=digest,
                function_index=i,
                kind=pb.RESOURCE_KIND_FUNCTION,
                function=self.functions[i].name,
                address=KERNEL_BASE + self.functions[i].offset,
                size=self.functions[i].size,
                metrics=plans,
            )
            for i in range(MEASURE_ROWS)
        ]
        return pb.MeasurementInfo(
            measurement_id=f"m-{self.host_id}",
            target="kernel",
            state=pb.MEASUREMENT_STATE_RUNNING,
            resources=rows,
            interval_ms=1000,
            started_unix_ns=time.time_ns(),
            request=pb.StartMeasurement(measurement_id=f"m-{self.host_id}", target="kernel", metrics=["count", "wall"]),
        )

    async def read_acks(self) -> None:
        try:
            while True:
                msg = await self.call.read()
                if msg is grpc.aio.EOF:
                    return
                if msg.WhichOneof("kind") == "ack" and msg.ack.instance_id == self.instance:
                    for s in [s for s in self.sent if s <= msg.ack.seq]:
                        self.acked_points += self.sent.pop(s)
                    self.acked_seq = max(self.acked_seq, msg.ack.seq)
        except grpc.aio.AioRpcError as exc:
            say(f"{self.host_id}: stream ended: {exc.code().name} {exc.details()}")

    async def send_interval(self, start_ns: int) -> int:
        self.seq += 1
        m = pb.AgentMessage(seq=self.seq, instance_id=self.instance)
        batch, stacks = self.templates[self.seq % len(self.templates)]
        m.metrics.CopyFrom(batch)
        m.metrics.interval_start_unix_ns = start_ns
        if stacks:
            # The agent sends a definition until a batch carrying it is acknowledged; here: once.
            st = m.metrics.stacks
            st.modules.add(kind=pb.FRAME_KIND_KERNEL_FUNCTION, digest=self.digest, name="vmlinux")
            st.comms.append("worker")
            st.max_depth = 64
            per = max(1, (batch.total_samples - batch.user_samples) // len(stacks))
            for k, s in enumerate(stacks):
                if s.id not in self.defined:
                    st.stacks.append(s)
                    self.defined.add(s.id)
                st.counts.add(stack_id=s.id, pid=1000 + k % 50, comm=0, cpu=k % 2, count=per)
            st.stack_samples = per * len(stacks)
        await self.call.write(m)
        points = BLOCKS
        self.sent[self.seq] = BLOCKS
        if self.measuring:
            self.seq += 1
            values = [
                pb.ResourceValues(
                    resource=r,
                    exits=100 + r,
                    values=[
                        pb.MetricValue(
                            metric=pb.METRIC_COUNT, value=100 + r, total=100 + r, unit=0, label=1, mechanism=0
                        ),
                        pb.MetricValue(
                            metric=pb.METRIC_WALL_NS, value=5e5 + r, total=500000 + r, unit=1, label=1, mechanism=1
                        ),
                    ],
                )
                for r in range(MEASURE_ROWS)
            ]
            mb = pb.AgentMessage(
                seq=self.seq,
                instance_id=self.instance,
                measurement=pb.MeasurementBatch(
                    measurement_id=f"m-{self.host_id}",
                    interval_start_unix_ns=start_ns,
                    interval_end_unix_ns=start_ns + 10**9,
                    state=pb.MEASUREMENT_STATE_RUNNING,
                    resources=values,
                    units=["calls", "ns"],
                    mechanisms=["fentry", "fentry+fexit"],
                ),
            )
            await self.call.write(mb)
            self.sent[self.seq] = MEASURE_ROWS * 3  # count, wall_ns, exits per row
            points += MEASURE_ROWS * 3
        return points


async def drive(hosts: list[Host], stop: asyncio.Event, offered: list[int]) -> None:
    """Each host sends one interval a second, spread over the second."""
    period = 1.0
    t_next = time.monotonic()
    while not stop.is_set():
        start_ns = time.time_ns() - 10**9
        live = list(hosts)
        gap = period / max(1, len(live))
        for i, h in enumerate(live):
            target = t_next + i * gap
            delay = target - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if h.call is not None:
                try:
                    offered[0] += await h.send_interval(start_ns)
                except (grpc.aio.AioRpcError, grpc.aio.UsageError):
                    pass
        t_next += period
        now = time.monotonic()
        if t_next < now:
            t_next = now
        await asyncio.sleep(max(0.0, t_next - now) if not live else 0)


def probe_main(token: str, host_ids: list[str], out: str, rate: float) -> None:
    """The REST prober (its own process): the console's questions, each answer's latency."""
    client = httpx.Client(base_url=URL, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    rng = random.Random(1)
    with open(out, "a") as f:
        while True:
            hid = rng.choice(host_ids) if host_ids else ""
            path, params = rng.choice(
                [
                    ("/api/v1/hosts", {}),
                    (f"/api/v1/hosts/{hid}/top-functions", {"window_s": 60, "limit": 50}),
                    (f"/api/v1/hosts/{hid}/timeline", {"window_s": 300}),
                    (f"/api/v1/hosts/{hid}/functions", {"q": "fn_001", "limit": 50}),
                ]
            )
            t0 = time.perf_counter()
            try:
                code = client.get(path, params=params).status_code
            except httpx.HTTPError:
                code = 0
            dt = time.perf_counter() - t0
            f.write(json.dumps({"t": time.time(), "ms": dt * 1000, "code": code}) + "\n")
            f.flush()
            time.sleep(max(0.0, 1 / rate - dt))


def ms(v: float) -> str:
    return "unavailable (no REST answer in the window)" if math.isnan(v) else f"{v:.0f} ms"


def percentile(values: list[float], q: float) -> float:
    """The q-quantile; NaN when nothing was measured (shown as unavailable, never as 0)."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def main() -> None:
    data = Path(tempfile.mkdtemp(prefix="hotpath-ingest-"))
    ok = False
    env = dict(
        os.environ,
        HOTPATH_DATA_DIR=str(data),
        HOTPATH_HTTP_PORT=str(HTTP),
        HOTPATH_GRPC_PORT=str(GRPC),
        HOTPATH_HTTP_HOST="127.0.0.1",
        HOTPATH_GRPC_HOST="127.0.0.1",
        HOTPATH_LOG_LEVEL="WARNING",
        HOTPATH_AGENT_STREAMS_PER_PEER="1000",
    )
    env.pop("DATABASE_URL", None)
    log = open(data / "backend.log", "ab")  # noqa: SIM115, ASYNC230 - the child keeps it
    # HOTPATH_INGEST_PROFILE=FILE: run the backend under cProfile (stats written to FILE when it stops).
    profile = os.environ.get("HOTPATH_INGEST_PROFILE")
    prof = ["-m", "cProfile", "-o", profile] if profile else []
    backend = subprocess.Popen(  # noqa: ASYNC220 - before any load
        [sys.executable, *prof, "-m", "app"],
        cwd=ROOT / "backend",
        env=env,
        stdout=log,
        stderr=log,
    )
    probe = None
    try:
        for _ in range(600):
            try:
                healthy = httpx.get(f"{URL}/api/v1/health", timeout=2).status_code == 200  # noqa: ASYNC210
                if healthy and (data / "admin-password").exists():
                    break
            except httpx.HTTPError:
                pass
            if backend.poll() is not None:
                raise SystemExit(f"the backend exited; see {data / 'backend.log'}")
            await asyncio.sleep(0.2)
        password = (data / "admin-password").read_text().strip()
        login = {"username": "admin", "password": password}
        token = httpx.post(f"{URL}/api/v1/auth/login", json=login).json()["access_token"]  # noqa: ASYNC210
        api = httpx.AsyncClient(base_url=URL, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        ca = (data / "tls" / "ca.pem").read_bytes()
        fns = kernel_functions(FUNCTIONS)
        digest = piece_digest(BUILD_ID, "vmlinux", KERNEL_BASE, fns)
        say(
            f"backend pid {backend.pid}; catalog of {FUNCTIONS} functions ({digest[:12]}); {BLOCKS} blocks per "
            f"interval with idle context and instruction counts, {STACKS} stack rows per interval, "
            f"{MEASURE_ROWS}-row measurement on every fourth host; REST {REST_RATE:g}/s"
        )
        hosts: list[Host] = []
        offered = [0]
        stop = asyncio.Event()
        driver = asyncio.create_task(drive(hosts, stop, offered))
        probe_out = data / "probe.jsonl"
        results = []
        for n in STEPS:
            while len(hosts) < n:
                r = await api.post("/api/v1/enrolment-tokens", json={"note": "bench/ingest", "hours": 1})
                h_index = len(hosts)
                host = Host(h_index, None, fns, digest)
                host.creds = await enroll(f"127.0.0.1:{GRPC + 1}", ca, host.host_id, r.json()["token"])
                await host.connect(digest)
                hosts.append(host)
                if len(hosts) % 20 == 0 or len(hosts) == n:
                    say(f"{len(hosts)} hosts connected")
            if probe is None:
                probe = subprocess.Popen(  # noqa: ASYNC220
                    [
                        sys.executable,
                        __file__,
                        "--probe",
                        token,
                        str(probe_out),
                        str(REST_RATE),
                        *[h.host_id for h in hosts[:10]],
                    ]
                )
            await asyncio.sleep(WARM_S)
            a0 = sum(h.acked_points for h in hosts)
            o0 = offered[0]
            c0, p0 = process_cpu(backend.pid), postgres_cpu(data / "pgdata")
            t0w, t0 = time.time(), time.monotonic()
            await asyncio.sleep(MEASURE_S)
            dt = time.monotonic() - t0
            stored = (sum(h.acked_points for h in hosts) - a0) / dt
            sent = (offered[0] - o0) / dt
            cores = (process_cpu(backend.pid) - c0) / dt
            pg_cores = (postgres_cpu(data / "pgdata") - p0) / dt
            lat = []
            if probe_out.exists():
                for line in probe_out.read_text().splitlines():
                    rec = json.loads(line)
                    if t0w <= rec["t"] <= t0w + dt:
                        lat.append(rec["ms"])
            p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
            per_core = stored / cores if cores > 0 else 0
            results.append((n, stored, sent, p99, cores, per_core))
            share = stored / max(sent, 1)
            say(
                f"{n:4d} hosts: sent {sent:9.0f} points/s, stored {stored:9.0f} points/s ({share:.0%}), "
                f"backend {cores:.2f} cores ({per_core:,.0f} points/s per core), Postgres {pg_cores:.2f} cores, "
                f"REST p50 {ms(p50)} p99 {ms(p99)} ({len(lat)} requests)"
            )
            if stored < 0.8 * sent or p99 > 2000:
                say("saturated; stopping the ramp")
                break
        stop.set()
        driver.cancel()
        good = [r for r in results if r[1] >= 0.95 * r[2] and r[3] < 200]
        ok_rate = [r for r in results if r[1] >= 0.95 * r[2]]
        knee = good[-1] if good else (ok_rate[0] if ok_rate else results[0])
        best = max(results, key=lambda r: r[1])
        say(
            f"highest stored rate: {best[1]:,.0f} points/s at {best[0]} hosts (REST p99 {ms(best[3])}); "
            f"at the knee the backend used {knee[4]:.2f} cores: {knee[5]:,.0f} points/s per backend core"
        )
        for h in hosts:
            if h.channel is not None:
                await h.channel.close()
        await api.aclose()
        print(
            f"ingest: {knee[1]:.0f} points/s stored by one backend process, knee at {knee[0]} hosts, "
            f"REST p99 {ms(knee[3])}"
        )
        ok = True
    finally:
        if probe is not None:
            probe.kill()
        backend.send_signal(signal.SIGTERM)
        try:
            backend.wait(30)
        except subprocess.TimeoutExpired:
            backend.kill()
            backend.wait()
        if ok:
            shutil.rmtree(data, ignore_errors=True)
        else:
            say(f"kept {data} (the backend's database)")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup: stop the backend
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        probe_main(sys.argv[2], sys.argv[5:], sys.argv[3], float(sys.argv[4]))
    else:
        asyncio.run(main())
