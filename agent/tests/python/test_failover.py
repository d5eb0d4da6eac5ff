# SPDX-License-Identifier: Apache-2.0
"""Two backend replicas behind a real HAProxy, the real hotpathd, kill -9 of the replica holding its
stream (issue 19: backends that scale out).

Real parts only: one embedded Postgres (pgserver), two `python -m app` replicas on it sharing one data
folder (started at the same moment), HAProxy 2.6 configured by deploy/haproxy_config.py (the console
door in `mode http`, the agent and enrolment doors as TCP passthrough, so mutual TLS stays end to end),
and hotpathd attached to this machine's kernel, enrolled and streaming through the balancer.

The run, in file order against one stack:
  1. the agent enrols and connects through the balancer; the console signs in once through it and
     its token works on both replicas (HAProxy names the replica that answered);
  2. the replica holding the agent's stream is frozen (SIGSTOP) until the agent has sent it data it
     never read (so never acknowledged), a command is accepted by the other replica meanwhile, and
     the frozen one is killed (SIGKILL). While it is frozen the test keeps HAProxy's health checks of
     it paused (HAProxy's own admin command), so the kill, not a failed check, ends the stream; they
     resume at the kill. The agent must be online on the other replica within FAILOVER_BOUND_S,
     every batch acknowledged before the kill must still be stored, the unacknowledged ones must
     arrive (sent again), the command must complete through the new holder, and every console
     request through the balancer meanwhile must answer (no retry but HAProxy's own);
  3. attacks: a client certificate of another CA through the balancer is refused by the replica;
     the per-source connection limit (HAProxy's stick table) holds per source address.
Ports: free ones, or nine from HOTPATH_FAILOVER_PORT_BASE on (the balancer's HTTP, agent and enrolment
ports, then each replica's)."""

import csv
import datetime as dt
import io
import itertools
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hotpath.v1 import agent_pb2 as pb
from hotpath.v1 import agent_pb2_grpc as pb_grpc
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.core import pki
from app.core.db import start_embedded_postgres, stop_embedded_postgres

ROOT = Path(__file__).resolve().parents[3]


def _ports(n: int) -> list[int]:
    if os.environ.get("HOTPATH_FAILOVER_PORT_BASE"):
        base = int(os.environ["HOTPATH_FAILOVER_PORT_BASE"])
        return list(range(base, base + n))
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


_P = _ports(9)
LB_HTTP, LB_GRPC, LB_ENROLL = _P[0:3]
REPLICAS = {"a": (_P[3], _P[4], _P[5]), "b": (_P[6], _P[7], _P[8])}
STREAMS_PER_SOURCE = 3  # the balancer's per-source cap in this test (64 by default)
HEALTH_INTER_S = 1.0  # HAProxy's check interval (deploy/haproxy_config.py's default); down after 3 failures
# The agent's reconnect backoff (agent/src/daemon/daemon.c): 0.5 s doubling to 4 s, each wait drawn
# between half and all of it; if every attempt until the balancer marks the dead replica down went
# there, the agent would wait 0.5 + 1 + 2 + 4 s at most. The balancer marks it down after 3 failed
# checks (connection refused at once) 1 s apart. Three times the sum, for a loaded machine:
FAILOVER_BOUND_S = 3 * ((0.5 + 1 + 2 + 4) + 3 * HEALTH_INTER_S)
HANG_S = 300.0  # bounds for what is bound to happen (the agent parsing the kernel, a start), not speed
INTERVAL_MS = 1000
CONTROL_BYTES = 512  # more unread bytes than HTTP/2's control frames make in a minute (test_kill_9_of_the_replica…)


def _wait(what: str, fn, timeout: float = HANG_S, every: float = 0.2):
    end = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > end:
            pytest.fail(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


class Stack:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "data"  # shared by both replicas: tls/, secret-key, admin-password
        self.procs: dict[str, subprocess.Popen] = {}
        self.db_url = ""
        self.pg = None
        self.agent: subprocess.Popen | None = None
        self.host_id = f"failover-{uuid.uuid4().hex[:10]}"
        self.state = folder / "agent-state"
        self.stats = folder / "haproxy.sock"
        self.token = ""

    # Parts ----------------------------------------------------------------------------------------

    def start_postgres(self) -> None:
        self.pg, server_url = start_embedded_postgres(self.folder / "pgdata")
        url = make_url(server_url)
        admin = create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text('CREATE DATABASE "hotpath_failover"'))
        admin.dispose()
        self.db_url = url.set(database="hotpath_failover").render_as_string(hide_password=False)
        self.db = create_engine(self.db_url)

    def start_replica(self, name: str) -> None:
        http, grpc_port, enroll = REPLICAS[name]
        env = dict(
            os.environ,
            HOTPATH_DATA_DIR=str(self.data),
            HOTPATH_HTTP_PORT=str(http),
            HOTPATH_GRPC_PORT=str(grpc_port),
            HOTPATH_ENROLL_PORT=str(enroll),
            HOTPATH_HTTP_HOST="127.0.0.1",
            HOTPATH_GRPC_HOST="127.0.0.1",
            HOTPATH_HTTPS="0",
            DATABASE_URL=self.db_url,
            HOTPATH_REPLICA_ID=f"replica-{name}",
            # Behind the balancer every stream comes from its address: the per-source cap is its.
            HOTPATH_AGENT_STREAMS_PER_PEER="100000",
        )
        with open(self.folder / f"replica-{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "app"], cwd=ROOT / "backend", env=env, stdout=log, stderr=log
            )

    def replica_healthy(self, name: str) -> bool:
        proc = self.procs[name]
        if proc.poll() is not None:
            pytest.fail(f"replica {name} exited: {(self.folder / f'replica-{name}.log').read_text()[-3000:]}")
        try:
            return httpx.get(f"http://127.0.0.1:{REPLICAS[name][0]}/api/v1/health", timeout=3).status_code == 200
        except httpx.HTTPError:
            return False

    def start_haproxy(self) -> None:
        replicas = [f"--replica={n}=127.0.0.1:{h}:{g}:{e}" for n, (h, g, e) in REPLICAS.items()]
        cfg = subprocess.run(
            [
                sys.executable,
                str(ROOT / "deploy" / "haproxy_config.py"),
                *replicas,
                f"--http-bind=127.0.0.1:{LB_HTTP}",
                f"--grpc-bind=127.0.0.1:{LB_GRPC}",
                f"--enroll-bind=127.0.0.1:{LB_ENROLL}",
                f"--streams-per-source={STREAMS_PER_SOURCE}",
                f"--inter-ms={int(HEALTH_INTER_S * 1000)}",
                f"--stats-socket={self.stats}",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (self.folder / "haproxy.cfg").write_text(cfg)
        with open(self.folder / "haproxy.log", "ab") as log:
            self.procs["haproxy"] = subprocess.Popen(
                ["haproxy", "-db", "-f", str(self.folder / "haproxy.cfg")], stdout=log, stderr=log
            )

    def lb(self, command: str) -> str:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(self.stats))
            s.sendall(command.encode() + b"\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out.decode()

    def lb_status(self) -> dict[tuple[str, str], str]:
        if self.procs["haproxy"].poll() is not None:
            pytest.fail(f"haproxy exited: {(self.folder / 'haproxy.log').read_text()[-3000:]}")
        if not self.stats.exists():
            return {}  # HAProxy is still starting
        rows = csv.reader(io.StringIO(self.lb("show stat").lstrip("# ")))
        head = next(rows)
        px, sv, st = head.index("pxname"), head.index("svname"), head.index("status")
        return {(r[px], r[sv]): r[st] for r in rows if len(r) > st and r[sv] in REPLICAS}

    def all_up(self, name: str) -> bool:
        st = self.lb_status()
        return all(st.get((b, name), "").startswith("UP") for b in ("replicas_http", "replicas_agents"))

    def start_agent(self, token: str, ca_pem: str) -> None:
        self.state.mkdir(mode=0o700)
        (self.folder / "token").write_text(token + "\n")
        (self.folder / "token").chmod(0o600)
        (self.folder / "ca.pem").write_text(ca_pem)
        with open(self.folder / "agent.log", "ab") as log:
            self.agent = subprocess.Popen(
                [
                    str(ROOT / "agent" / "build" / "hotpathd"),
                    "run",
                    "--server",
                    f"127.0.0.1:{LB_GRPC}",
                    "--enroll-server",
                    f"127.0.0.1:{LB_ENROLL}",
                    "--state-dir",
                    str(self.state),
                    "--enroll-token-file",
                    str(self.folder / "token"),
                    "--ca-file",
                    str(self.folder / "ca.pem"),
                    "--host-id",
                    self.host_id,
                    "--interval-ms",
                    str(INTERVAL_MS),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def agent_log(self) -> str:
        return (self.folder / "agent.log").read_text(errors="replace")

    # The console through the balancer ---------------------------------------------------------------

    def console(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"http://127.0.0.1:{LB_HTTP}", headers={"Authorization": f"Bearer {self.token}"}, timeout=60
        )

    def host(self, client: httpx.Client) -> dict:
        r = client.get(f"/api/v1/hosts/{self.host_id}")
        return r.json() if r.status_code == 200 else {}

    # The database ---------------------------------------------------------------------------------

    def intervals(self) -> list[tuple[dt.datetime, int]]:
        with self.db.connect() as conn:
            return [
                (r.ts, r.interval_ms)
                for r in conn.execute(
                    text("SELECT ts, interval_ms FROM sample_intervals WHERE host_id = :h ORDER BY ts"),
                    {"h": self.host_id},
                )
            ]

    def mark(self) -> int:
        with self.db.connect() as conn:
            return conn.execute(
                text("SELECT coalesce(max(seq), 0) FROM delivery_marks WHERE host_id = :h"), {"h": self.host_id}
            ).scalar_one()

    def gaps(self) -> list:
        with self.db.connect() as conn:
            return list(conn.execute(text("SELECT * FROM data_gaps WHERE host_id = :h"), {"h": self.host_id}))

    def stop(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.terminate()
            try:
                self.agent.wait(30)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()
        for name, proc in self.procs.items():
            if proc.poll() is None:
                if name in REPLICAS:
                    proc.send_signal(signal.SIGCONT)
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self.pg is not None:
            self.db.dispose()
            stop_embedded_postgres(self.pg)


@pytest.fixture(scope="module")
def stack(hotpathd):
    if shutil.which("haproxy") is None:
        pytest.fail("haproxy is missing: ./scripts/install-deps.sh test installs it")
    s = Stack(Path(tempfile.mkdtemp(prefix="hotpath-failover-")))
    try:
        s.start_postgres()
        for name in REPLICAS:  # at the same moment, on one fresh folder and one fresh database
            s.start_replica(name)
        for name in REPLICAS:
            _wait(f"replica {name} healthy", lambda n=name: s.replica_healthy(n))
        s.start_haproxy()
        _wait("HAProxy sees both replicas up", lambda: all(s.all_up(n) for n in REPLICAS))
        yield s
    finally:
        s.stop()
        print(f"failover stack's logs: {s.folder}")


def test_the_agent_and_the_console_go_through_the_balancer_to_both_replicas(stack):
    password = (stack.data / "admin-password").read_text().strip()
    r = httpx.post(
        f"http://127.0.0.1:{LB_HTTP}/api/v1/auth/login", json={"username": "admin", "password": password}, timeout=60
    )
    assert r.status_code == 200, r.text
    stack.token = r.json()["access_token"]  # signed once, through whichever replica answered
    with stack.console() as c:
        served = []
        for _ in range(6):  # round robin: both replicas answer with the one token
            r = c.get("/api/v1/hosts")
            assert r.status_code == 200, r.text
            served.append(r.headers["x-hotpath-replica"])
        assert set(served) == set(REPLICAS), served
        created = c.post("/api/v1/enrolment-tokens", json={"note": "failover test", "host_id": stack.host_id})
        assert created.status_code in (200, 201), created.text
        body = created.json()
    # One installation: the CA the token's answer names is the shared folder's, whichever replica spoke.
    assert body["ca_pem"] == (stack.data / "tls" / "ca.pem").read_text()
    stack.start_agent(body["token"], body["ca_pem"])
    with stack.console() as c:
        host = _wait(
            "the agent online through the balancer",
            lambda: (h := stack.host(c)) and h["online"] and h["catalog_complete"] and h,
            every=1,
        )
        assert host["replica"] in ("replica-a", "replica-b")
    assert (stack.state / "host.pem").exists()  # enrolled through the balancer's enrolment door
    _wait("the agent's first batches stored", lambda: len(stack.intervals()) >= 3, every=0.5)


def _unread_bytes(port: int) -> int:
    """Bytes the agent sent that the replica listening on `port` has not read (its receive queue)."""
    out = subprocess.run(
        ["ss", "-Htn", "state", "established", f"( sport = :{port} )"], capture_output=True, text=True, check=True
    ).stdout
    return sum(int(line.split()[0]) for line in out.splitlines() if line.strip())


def test_kill_9_of_the_replica_holding_the_stream(stack):
    with stack.console() as c:
        holder = stack.host(c)["replica"].removeprefix("replica-")
    other = next(n for n in REPLICAS if n != holder)
    proc = stack.procs[holder]
    # Pause HAProxy's checks of the holder while it is frozen (they would mark it down before the kill);
    # the server stays as it was, up, so the kill alone is what the balancer and the agent react to.
    for backend in ("replicas_http", "replicas_agents", "replicas_enrolment"):
        assert stack.lb(f"disable health {backend}/{holder}").strip() == ""
    proc.send_signal(signal.SIGSTOP)
    # The agent keeps sending a batch every interval (its catalog is stored: no upload holds the
    # stream's flow-control window); the frozen replica reads none of it, nor acknowledges it, so the batch
    # waits in the agent's outbox. Wait for more unread bytes than HTTP/2's own frames make: a WINDOW_UPDATE
    # for the acknowledgements read just before the freeze, a keepalive PING every 20 s, each tens of bytes
    # with TLS's. Waiting for any byte once let such a frame alone pass, and the kill came before any batch
    # was sent (a fresh run: the agent's outbox empty when the stream ended). A batch every INTERVAL_MS of at
    # least ~50 bytes with its framing passes CONTROL_BYTES within seconds.
    _wait(
        "a batch the frozen holder has not read",
        lambda: _unread_bytes(REPLICAS[holder][1]) > CONTROL_BYTES,
        timeout=60,
    )
    acked_mark = stack.mark()  # committed and acknowledged (an ack follows its commit): the mark
    stored_before = stack.intervals()
    # A command, accepted by the replica that is not frozen; the holder cannot claim it.
    target = subprocess.Popen(["sleep", "600"])
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{REPLICAS[other][0]}",
            headers={"Authorization": f"Bearer {stack.token}"},
            timeout=60,
        ) as direct:
            r = direct.post(f"/api/v1/hosts/{stack.host_id}/targets", json={"pid": target.pid})
            assert r.status_code == 202, r.text
            command = r.json()["id"]
            assert r.json()["state"] == "queued"
        proc.send_signal(signal.SIGKILL)
        t_kill = time.monotonic()
        proc.wait()
        for backend in ("replicas_http", "replicas_agents", "replicas_enrolment"):
            stack.lb(f"enable health {backend}/{holder}")
        # The console through the balancer, request after request, until the agent is back.
        answered: list[str] = []
        with stack.console() as c:
            while True:
                r = c.get(f"/api/v1/hosts/{stack.host_id}")
                assert r.status_code == 200, f"the balancer answered {r.status_code}: {r.text[:300]}"
                answered.append(r.headers["x-hotpath-replica"])
                h = r.json()
                if h["online"] and h["replica"] == f"replica-{other}":
                    failover = time.monotonic() - t_kill
                    break
                if time.monotonic() - t_kill > HANG_S:
                    pytest.fail(f"the agent did not come back: {h}\n{stack.agent_log()[-3000:]}")
                time.sleep(0.1)
            print(
                f"failover: the agent online on replica {other} {failover:.2f} s after kill -9 of replica "
                f"{holder} (bound {FAILOVER_BOUND_S:.1f} s); {len(answered)} console requests meanwhile, "
                f"all answered"
            )
            assert failover < FAILOVER_BOUND_S
            assert set(answered) == {other}
            # The command accepted before the kill reaches the agent through the new holder and completes.
            done = _wait(
                "the command done",
                lambda: (
                    (x := c.get(f"/api/v1/hosts/{stack.host_id}/commands/{command}").json())["state"]
                    in ("done", "failed")
                    and x
                ),
                timeout=120,
            )
            assert done["state"] == "done", done
            assert any(t["pid"] == target.pid for t in done["result"]["targets"]), done["result"]
            audit = c.get("/api/v1/audit", params={"action": "command_sent", "limit": 50}).json()
            sent = [e for e in audit if e["target"] == stack.host_id and str(command) in str(e.get("detail"))]
            assert sent and {e["actor"] for e in sent} == {f"replica:replica-{other}"}, sent
    finally:
        target.kill()
        target.wait()
    # Nothing acknowledged is lost, nothing unacknowledged either: the agent sent the batches the frozen
    # replica never read again, after the reconnect.
    waiting = [int(n) for n in re.findall(r"(\d+) data message\(s\) wait for an acknowledgement", stack.agent_log())]
    assert waiting and waiting[-1] >= 1, stack.agent_log()[-3000:]
    _wait("the resent batches stored", lambda: stack.mark() >= acked_mark + waiting[-1], timeout=120)
    after = stack.intervals()
    assert set(stored_before) <= set(after)
    times = [t for t, _ in after]
    assert len(times) == len(set(times)), "a batch stored twice"
    holes = [
        (a.isoformat(), b.isoformat())
        for (a, ms), (b, _) in itertools.pairwise(after)
        if b - a > dt.timedelta(milliseconds=ms) * 1.5
    ]
    assert not holes and not stack.gaps(), (holes, stack.gaps())
    print(
        f"data: {len(stored_before)} intervals stored before the kill (mark {acked_mark}), {waiting[-1]} "
        f"unacknowledged messages sent again, {len(after)} stored now, no hole, no gap reported"
    )


def _csr(host_id: str) -> tuple[bytes, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host_id)]))
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return pem, csr.public_bytes(serialization.Encoding.PEM).decode()


def test_a_certificate_of_another_ca_through_the_balancer_is_refused(stack, tmp_path):
    other = pki.load_or_create(tmp_path / "other-ca")
    key, csr = _csr(stack.host_id)  # even for the id of a real, enrolled host
    cert, _fp, _na = other.sign_host_csr(csr, stack.host_id)
    ca = (stack.data / "tls" / "ca.pem").read_bytes()
    creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert.encode())
    with grpc.secure_channel(f"127.0.0.1:{LB_GRPC}", creds) as channel:
        call = pb_grpc.AgentServiceStub(channel).Connect(
            iter([pb.AgentMessage(hello=pb.Hello(host_id=stack.host_id))]), timeout=60
        )
        with pytest.raises(grpc.RpcError) as err:
            next(call)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # the replica's TLS handshake refused it
    # The real agent, its certificate of the installation's CA, stays connected meanwhile.
    with stack.console() as c:
        assert stack.host(c)["online"]


def _handshake(source: str, ctx: ssl.SSLContext) -> ssl.SSLSocket | None:
    """A TLS connection from `source` through the balancer's agent door, or None if it was refused."""
    try:
        raw = socket.create_connection(("127.0.0.1", LB_GRPC), timeout=30, source_address=(source, 0))
    except ConnectionError:
        return None  # reset by the balancer as it accepted it
    try:
        return ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    except (ssl.SSLError, OSError):  # closed by the balancer before the handshake ended
        raw.close()
        return None


def test_the_per_source_limit_holds_per_source_behind_the_balancer(stack):
    # The agent's own credentials, so that an accepted connection completes its handshake with a replica.
    ctx = ssl.create_default_context(cafile=str(stack.data / "tls" / "ca.pem"))
    ctx.load_cert_chain(str(stack.state / "host.pem"), str(stack.state / "host.key"))
    ctx.set_alpn_protocols(["h2"])
    held = []
    try:
        for i in range(STREAMS_PER_SOURCE):
            tls = _handshake("127.0.0.2", ctx)
            assert tls is not None, f"connection {i + 1} of {STREAMS_PER_SOURCE} from 127.0.0.2 was refused"
            held.append(tls)
        assert _handshake("127.0.0.2", ctx) is None, "a connection beyond the per-source limit was accepted"
        other = _handshake("127.0.0.3", ctx)  # another source is not held back by 127.0.0.2's
        assert other is not None
        held.append(other)
        with stack.console() as c:
            assert stack.host(c)["online"]  # the agent (127.0.0.1) keeps its stream
    finally:
        for s in held:
            s.close()
    # The limit counts connections open now: once they close, the source may connect again.
    tls = _wait("127.0.0.2 accepted again", lambda: _handshake("127.0.0.2", ctx), timeout=60)
    tls.close()
