# SPDX-License-Identifier: Apache-2.0
"""The agent's side of the AgentService contract, against the real hotpathd
attached to this machine's live kernel.

The server in this file is a scripted backend stand-in: a real gRPC server on
free local ports (mutual TLS for Connect, TLS for Enroll, with certificates
from the backend's own CA code) whose replies (certificates, Welcome, acks,
commands, cancelling the stream) are driven by each test step, so every
message the agent sends can be checked. The tests run in file order against
one agent process, because the agent parses the whole kernel once at
start-up, exactly as in production."""

import ctypes
import errno
import itertools
import json
import os
import pathlib
import platform
import queue
import re
import signal
import socket
import struct
import subprocess
import threading
import time
from concurrent import futures

import grpc
import pytest
from hotpath.v1 import agent_pb2 as pb

GOOD_TOKEN = "hpe_enrolment-token-for-stream-test"


def _kernel_build_id() -> str:
    data = pathlib.Path("/sys/kernel/notes").read_bytes()
    off = 0
    while off + 12 <= len(data):
        namesz, descsz, ntype = (int.from_bytes(data[off + i : off + i + 4], "little") for i in (0, 4, 8))
        off += 12
        name = data[off : off + namesz]
        off += (namesz + 3) & ~3
        desc = data[off : off + descsz]
        off += (descsz + 3) & ~3
        if ntype == 3 and name.rstrip(b"\0") == b"GNU":
            return desc.hex()
    return ""


class Session:
    """One accepted Connect stream, as seen by the stand-in server."""

    def __init__(self, context):
        self.context = context
        self.outbox: queue.Queue = queue.Queue()
        self.hello: queue.Queue = queue.Queue()
        self.metrics: queue.Queue = queue.Queue()
        self.raw_metrics: queue.Queue = queue.Queue()
        self.chunks: queue.Queue = queue.Queue()
        self.results: queue.Queue = queue.Queue()
        self.other: queue.Queue = queue.Queue()
        self.ended = threading.Event()
        # Every result and measurement batch in the order the stream delivered them: ("result", command
        # id) or ("measurement", "ID:STATE").
        self.arrived: list[tuple[str, str]] = []

    def route(self, msg: pb.AgentMessage) -> None:
        kind = msg.WhichOneof("kind")
        if kind == "result":
            self.arrived.append((kind, msg.result.command_id))
        elif kind == "measurement":
            self.arrived.append((kind, f"{msg.measurement.measurement_id}:{msg.measurement.state}"))
        target = {
            "hello": self.hello,
            "metrics": self.metrics,
            "catalog_chunk": self.chunks,
            "result": self.results,
        }.get(kind, self.other)
        target.put((time.monotonic(), getattr(msg, kind) if kind else msg))
        if kind == "metrics":
            self.raw_metrics.put(msg)  # with its sequence number and instance id

    def send(self, msg: pb.ServerMessage) -> None:
        self.outbox.put(msg)

    def cancel(self) -> None:
        self.outbox.put("cancel")


class ScriptedBackend:
    """Scripted backend stand-in implementing AgentService.Connect and Enroll."""

    def __init__(self, pki):
        self.pki = pki
        self.enrolments: queue.Queue = queue.Queue()
        self.sessions: queue.Queue = queue.Queue()
        self.auto_ack = True
        self.peer_names: list[str] = []
        # Cleared: the stream's reader takes no more messages, as a backend too loaded to read.
        self.reading = threading.Event()
        self.reading.set()

    def enroll(self, request, context):
        self.enrolments.put(request)
        if request.token != GOOD_TOKEN:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "the enrolment token is unknown, used, revoked or expired")
        cert, _fp, not_after = self.pki.sign_host_csr(request.csr_pem, request.host_id)
        return pb.EnrollResponse(
            certificate_pem=cert, ca_pem=self.pki.ca_pem.decode(), not_after_unix=int(not_after.timestamp())
        )

    def connect(self, request_iterator, context):
        names = (context.auth_context() or {}).get("x509_common_name") or []
        self.peer_names.append(names[0].decode() if names else "")
        sess = Session(context)

        def reader():
            try:
                for msg in request_iterator:
                    self.reading.wait()
                    sess.route(msg)
                    if self.auto_ack and msg.WhichOneof("kind") in ("metrics", "gap", "measurement") and msg.seq:
                        sess.send(pb.ServerMessage(ack=pb.Ack(instance_id=msg.instance_id, seq=msg.seq)))
            except grpc.RpcError:
                pass
            sess.ended.set()

        threading.Thread(target=reader, daemon=True).start()
        self.sessions.put(sess)
        while context.is_active():
            try:
                item = sess.outbox.get(timeout=0.1)
            except queue.Empty:
                continue
            if item == "cancel":
                context.abort(grpc.StatusCode.UNAVAILABLE, "backend going away")
            yield item


def _get(q: "queue.Queue", timeout: float, what: str):
    try:
        return q.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"no {what} within {timeout} s")


def _drain(q: "queue.Queue") -> None:
    """Drop what q holds now (what was queued before the step a test waits on)."""
    while not q.empty():
        q.get()


class AgentRun:
    def __init__(self, proc, log_path, backend):
        self.proc = proc
        self.log_path = log_path
        self.backend = backend
        self.session = None
        self.catalog = {}  # function index -> pb.Function (vmlinux)
        self.vmlinux = None
        self.hello = None

    def log(self) -> str:
        return pathlib.Path(self.log_path).read_text(errors="replace")


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The scripted backend stand-in's servers: (backend, agent port, enrolment port, CA file)."""
    yield from standin_servers(tmp_path_factory.mktemp("standin"))


def standin_servers(tmp: pathlib.Path):
    """Start the stand-in's servers with a CA in tmp; yields what the standin fixture gives."""
    from app.core import pki

    authority = pki.load_or_create(tmp / "tls")
    backend = ScriptedBackend(authority)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        options=[
            ("grpc.max_receive_message_length", 8 << 20),
            # The backend's keepalive policy (app/agents/service.py): the agent's pings are welcome.
            ("grpc.keepalive_time_ms", 30000),
            ("grpc.keepalive_timeout_ms", 10000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 10000),
        ],
    )
    handler = grpc.method_handlers_generic_handler(
        "hotpath.v1.AgentService",
        {
            "Connect": grpc.stream_stream_rpc_method_handler(
                backend.connect,
                request_deserializer=pb.AgentMessage.FromString,
                response_serializer=pb.ServerMessage.SerializeToString,
            ),
            "Enroll": grpc.unary_unary_rpc_method_handler(
                backend.enroll,
                request_deserializer=pb.EnrollRequest.FromString,
                response_serializer=pb.EnrollResponse.SerializeToString,
            ),
        },
    )
    server.add_generic_rpc_handlers((handler,))
    pair = [(authority.server_key_pem, authority.server_cert_pem)]
    port = server.add_secure_port(
        "127.0.0.1:0", grpc.ssl_server_credentials(pair, root_certificates=authority.ca_pem, require_client_auth=True)
    )
    enroll_port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(pair))
    server.start()
    yield backend, port, enroll_port, tmp / "tls" / "ca.pem"
    server.stop(grace=None)


def test_a_refused_enrolment_token_stops_the_agent_with_the_reason(hotpathd, standin, tmp_path):
    backend, port, enroll_port, ca = standin
    bad = tmp_path / "token"
    bad.write_text("hpe_not-a-token\n")
    proc = subprocess.run(
        [
            str(hotpathd),
            "run",
            "--server",
            f"127.0.0.1:{port}",
            "--enroll-server",
            f"127.0.0.1:{enroll_port}",
            "--state-dir",
            str(tmp_path / "state"),
            "--enroll-token-file",
            str(bad),
            "--ca-file",
            str(ca),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "UNAUTHENTICATED: the enrolment token is unknown" in proc.stderr
    request = _get(backend.enrolments, 1, "enrolment request")
    assert request.token == "hpe_not-a-token"
    assert "BEGIN CERTIFICATE REQUEST" in request.csr_pem
    # The key was made and kept private; no certificate was stored.
    assert (tmp_path / "state" / "host.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    assert not (tmp_path / "state" / "host.pem").exists()


@pytest.fixture(scope="module")
def agent(hotpathd, standin, tmp_path_factory):
    backend, port, enroll_port, ca = standin
    tmp = tmp_path_factory.mktemp("stream")
    token_file = tmp / "token"
    token_file.write_text(GOOD_TOKEN + "\n")
    log_path = tmp / "agent.log"
    env = dict(os.environ)
    env.pop("HOTPATH_ENROLL_TOKEN", None)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                str(hotpathd),
                "run",
                "--server",
                f"127.0.0.1:{port}",
                "--enroll-server",
                f"127.0.0.1:{enroll_port}",
                "--state-dir",
                str(tmp / "state"),
                "--enroll-token-file",
                str(token_file),
                "--ca-file",
                str(ca),
                "--interval-ms",
                "1000",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    run = AgentRun(proc, log_path, backend)
    run.state = tmp / "state"
    yield run
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _host_has_pmu() -> bool:
    """Open a CPU-cycles counter for this thread, as the agent's probe does, but independently."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = bytearray(128)
    struct.pack_into("IIQ", attr, 0, 0, 128, 0)  # PERF_TYPE_HARDWARE, size, PERF_COUNT_HW_CPU_CYCLES
    struct.pack_into("Q", attr, 40, 1 << 0 | 1 << 5 | 1 << 6)  # disabled, exclude_kernel, exclude_hv
    buf = ctypes.create_string_buffer(bytes(attr), 128)
    fd = libc.syscall(298, buf, 0, -1, -1, 0)  # perf_event_open(attr, this thread, any CPU)
    if fd < 0:
        return False
    os.close(fd)
    return True


def _module_loading_errno() -> int:
    """finit_module(-1, "", 0): EBADF where module loading exists, ENOSYS where the kernel has none."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(313, -1, b"", 0)
    return ctypes.get_errno()


def test_agent_enrols_with_its_token_and_connects_as_its_host(agent):
    request = _get(agent.backend.enrolments, 60, "enrolment request")
    machine_id = pathlib.Path("/etc/machine-id").read_text().strip()
    assert request.token == GOOD_TOKEN and request.host_id == machine_id
    assert request.hostname == socket.gethostname()
    agent.session = _get(agent.backend.sessions, 40, "accepted stream")
    assert agent.backend.peer_names[-1] == machine_id, "the stream must present the host's certificate"
    for name in ("host.key", "host.pem", "ca.pem"):
        assert (agent.state / name).stat().st_mode & 0o777 == 0o600, name
    assert "enrolled as host" in agent.log()


def test_hello_describes_this_host(agent):
    _, hello = _get(agent.session.hello, 10, "Hello")
    uname = platform.uname()
    assert hello.kernel_release == uname.release
    assert hello.hostname == socket.gethostname()
    assert hello.cpu_count == os.cpu_count()
    assert hello.l1i.line_bytes == 64
    assert hello.l1i.size_bytes > 0
    assert hello.kernel_build_id == _kernel_build_id()
    assert hello.host_id == pathlib.Path("/etc/machine-id").read_text().strip()
    assert hello.agent_version == "0.1.0"
    assert hello.metric_interval_ms == 1000
    assert hello.sample_frequency_hz == 997
    caps = {c.name: c for c in hello.capabilities}
    # What the agent claims must match what this host really allows, probed here independently.
    if _host_has_pmu():
        assert hello.sample_event == "cycles"
        assert caps["hardware_pmu"].available
    else:
        assert hello.sample_event == "cpu-clock"
        assert not caps["hardware_pmu"].available
        assert "perf_event_open(cycles)" in caps["hardware_pmu"].detail
    assert hello.parse_seconds > 0
    assert re.fullmatch(r"[0-9a-f]{32}", hello.instance_id)
    assert abs(hello.clock_unix_ns - time.time_ns()) < 60e9
    assert caps["perf_sampling"].available and hello.sample_event in caps["perf_sampling"].detail
    assert caps["bpf_text_read"].available
    assert caps["kprobes"].available == os.path.isdir("/sys/bus/event_source/devices/kprobe")
    assert caps["kprobes"].detail
    if _module_loading_errno() == errno.ENOSYS:
        assert not caps["kernel_code_replacement"].available
        assert "ENOSYS" in caps["kernel_code_replacement"].detail
    assert caps["kernel_code_replacement"].detail
    # sched_switch hooks (virtualized timers): raw tracepoints need only BPF, tp_btf the kernel's BTF,
    # classic tracepoints tracefs (their ids). Every probe mechanism is listed, available or not.
    assert caps["raw_tracepoints"].available
    assert caps["tp_btf"].available == os.path.exists("/sys/kernel/btf/vmlinux")
    tracefs = any(os.path.isdir(p) for p in ("/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"))
    assert caps["tracepoints"].available == tracefs, caps["tracepoints"].detail
    for name in ("fentry", "fexit", "kretprobes", "uprobes", "uretprobes", "uprobe_multi", "ptrace", "cgroup_v2"):
        assert caps[name].detail, name
    assert hello.modules[0].name == "vmlinux"
    agent.hello = hello
    agent.vmlinux = hello.modules[0]
    assert re.fullmatch(r"[0-9a-f]{64}", agent.vmlinux.digest)
    assert agent.vmlinux.function_count > 10000
    assert agent.vmlinux.base_address >= 0xFFFFFFFF80000000
    # Only after the Welcome does the agent send anything but Hello.
    assert agent.session.chunks.empty() and agent.session.metrics.empty()


def test_welcome_with_missing_digest_yields_the_catalog(agent):
    sess = agent.session
    sess.send(pb.ServerMessage(welcome=pb.Welcome(session_id="s-1", missing_digests=[agent.vmlinux.digest])))
    seq, total = 0, 0
    while True:
        _, chunk = _get(sess.chunks, 60, f"catalog chunk {seq}")
        assert chunk.digest == agent.vmlinux.digest and chunk.module == "vmlinux"
        assert chunk.seq == seq
        assert chunk.ByteSize() < 4 << 20
        for fn in chunk.functions:
            assert fn.index == len(agent.catalog), "function indexes must be consecutive"
            agent.catalog[fn.index] = fn
        total += len(chunk.functions)
        seq += 1
        if chunk.last:
            break
    assert total == agent.vmlinux.function_count
    assert sum(len(f.blocks) for f in agent.catalog.values()) == agent.vmlinux.block_count
    vfs_read = [f for f in agent.catalog.values() if f.name == "vfs_read"]
    assert len(vfs_read) == 1
    fn = vfs_read[0]
    assert fn.size > 0 and len(fn.blocks) > 1
    pos = 0
    for b in fn.blocks:
        assert b.offset == pos, "blocks must tile the function without gaps"
        assert b.size > 0 and b.instruction_count > 0
        pos += b.size
    assert pos == fn.size
    kinds = {s.kind for b in fn.blocks for s in b.successors}
    assert pb.SUCCESSOR_KIND_TAKEN in kinds and pb.SUCCESSOR_KIND_FALLTHROUGH in kinds
    assert any(c.target_name for c in fn.calls)
    assert all(c.target_module == "vmlinux" for c in fn.calls if c.target_name)


def test_backend_recomputes_the_agents_catalog_digest(agent):
    """The backend's canonical encoding (app.protocol.catalog_digest) gives the real agent's digest for the
    live kernel's whole catalog, so honest pieces verify and anything else does not."""
    from app.protocol.catalog_digest import piece_digest

    functions = [agent.catalog[i] for i in range(len(agent.catalog))]
    build = agent.hello.kernel_build_id or agent.hello.kernel_release
    core_base = agent.hello.modules[0].base_address
    assert piece_digest(build, "vmlinux", core_base, functions) == agent.vmlinux.digest
    # And every function the real agent sends passes the backend's checks of the model's invariants.
    from app.protocol.agent_input import check_function

    for i, f in enumerate(functions):
        check_function(f, i)
    # And every named call and tail-call target the real agent sends agrees with the function it names
    # where the piece holds it (app.storage.catalog.TargetCheck), so honest pieces are not refused for their targets.
    from app.storage.catalog import TargetCheck, check_targets, function_rows

    targets = TargetCheck("vmlinux")
    for _ in function_rows("check", agent.vmlinux.base_address, functions, targets):
        pass
    problem, unchecked = check_targets(targets)
    print(
        f"\n{len(targets.pending)} named same-module targets checked, {len(unchecked)} whose name the "
        "piece does not hold (stored without an address)"
    )
    assert problem is None, problem
    assert len(targets.pending) > 10000, "the live kernel has many named same-module targets"
    assert len(unchecked) < len(targets.pending) // 10, (len(unchecked), len(targets.pending))
    functions[len(functions) // 2].blocks[0].size += 1
    assert piece_digest(build, "vmlinux", core_base, functions) != agent.vmlinux.digest


def test_parse_json_prints_the_catalog_digest_the_upload_uses(agent, hotpathd):
    """`hotpathd parse kernel --json` prints each module's catalog digest: the one the agent announced
    in Hello and sent with the catalog chunks, which the backend recomputed from them above."""
    out = subprocess.run(
        [str(hotpathd), "parse", "kernel", "--json"], capture_output=True, text=True, timeout=300, check=True
    )
    parsed = json.loads(out.stdout)
    assert [m["name"] for m in parsed["modules"]] == [m.name for m in agent.hello.modules]
    for printed, announced in zip(parsed["modules"], agent.hello.modules, strict=True):
        assert printed["digest"] == announced.digest, printed["name"]


def test_metric_batches_arrive_every_interval(agent):
    sess = agent.session
    _drain(sess.metrics)  # batches that queued up behind the catalog
    batches = [_get(sess.metrics, 5, "metric batch") for _ in range(4)]
    # The intervals tile time in the agent's own clock: each starts where the one before ended (its
    # interval_ms is that length, rounded to the ms). How far apart they arrive here, and how long one is,
    # depend on when the machine lets the agent's timer run (a loaded machine delays a tick), so the length
    # is bounded by a hang's, not by the 1 s aimed at. The ticks aim at a fixed schedule (one interval
    # after the last aim, restarted from now when a whole interval was missed), so a tick late by L makes
    # its interval L longer and the next one L shorter, L under one interval: one interval may be short
    # (550 ms was seen under load), but two consecutive ones always span more than one interval.
    for (_, a), (_, b) in itertools.pairwise(batches):
        assert abs(b.interval_start_unix_ns - (a.interval_start_unix_ns + a.interval_ms * 1_000_000)) <= 1_000_000, (
            a.interval_start_unix_ns,
            a.interval_ms,
            b.interval_start_unix_ns,
        )
        assert a.interval_ms + b.interval_ms > 1000 - 2, (a.interval_ms, b.interval_ms)  # 2: ms rounding
    now_ns = time.time_ns()
    mapped = 0
    for _, b in batches:
        assert b.total_samples > 0
        assert 0 < b.interval_ms <= 5000
        assert abs(now_ns - b.interval_start_unix_ns) < 30e9
        assert b.user_samples + b.unmapped_samples <= b.total_samples
        assert sum(s.count for s in b.blocks) + b.user_samples + b.unmapped_samples == b.total_samples
        for s in b.blocks:
            assert s.count > 0
            assert agent.hello.modules[s.module_index].name == "vmlinux"
            fn = agent.catalog[s.function_index]
            assert s.block_offset in {blk.offset for blk in fn.blocks}
            mapped += s.count
    assert mapped > 0


def test_batches_are_numbered_consecutively_by_this_run(agent):
    sess = agent.session
    _drain(sess.raw_metrics)
    msgs = [_get(sess.raw_metrics, 5, "numbered batch") for _ in range(3)]
    seqs = [m.seq for m in msgs]
    assert all(b == a + 1 for a, b in itertools.pairwise(seqs)), seqs
    assert all(m.instance_id == agent.hello.instance_id for m in msgs)


def test_stacks_travel_with_ids_the_backend_recomputes_and_definitions_stop_once_acknowledged(agent, tmp_path):
    """Every batch carries the interval's call stacks; the backend's own checks accept them (their ids
    recomputed from the frames), kernel frames lie in the catalog's functions, idle is the idle task's
    samples, and a stack defined in an acknowledged batch is later counted by id alone. A process spinning
    in one known chain (main -> cc_outer -> cc_middle -> cc_inner) keeps some stacks recurring even when a
    loaded machine never runs its idle task."""
    from app.protocol.agent_input import check_batch, check_stacks

    fixture = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "callchain.c"
    spin = tmp_path / "callchain"
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-fno-inline", "-o", str(spin), str(fixture)], check=True)
    spinner = subprocess.Popen([str(spin), "30"])
    try:
        sess = agent.session
        _drain(sess.raw_metrics)
        msgs = [_get(sess.raw_metrics, 5, "batch with stacks") for _ in range(5)]
    finally:
        spinner.kill()
        spinner.wait()
    kernel_frames = 0
    for m in msgs:
        b = m.metrics
        check_batch(b)
        assert b.HasField("stacks") and b.idle_by_context
        st = b.stacks
        parsed = check_stacks(st, b.total_samples)  # raises on anything the backend would refuse
        assert st.stack_samples + st.dropped_samples == b.total_samples
        assert st.max_depth == 64
        assert sum(c.count for c in st.counts if c.pid == 0) == b.idle_samples
        assert all(st.comms[c.comm] == "swapper" for c in st.counts if c.pid == 0)
        assert sum(s.count for s in b.blocks if s.idle) <= b.idle_samples
        for s in b.blocks:
            assert sum(s.instruction_counts) == s.count and len(s.instruction_offsets) == len(s.instruction_counts)
        for stack in st.stacks:
            for f in stack.frames:
                mod = st.modules[f.module]
                if mod.kind == pb.FRAME_KIND_KERNEL_FUNCTION and mod.name == "vmlinux":
                    assert mod.digest == agent.vmlinux.digest
                    fn = agent.catalog[f.function_index]
                    assert f.offset <= fn.size, (fn.name, f.offset, fn.size)
                    kernel_frames += 1
        assert len(parsed.rows) == len({c.stack_id for c in st.counts})
    assert kernel_frames > 0
    defined_early = {s.id for m in msgs[:2] for s in m.metrics.stacks.stacks}
    late = msgs[4].metrics.stacks
    counted_late = {c.stack_id for c in late.counts}
    again = {s.id for s in late.stacks} & defined_early & counted_late
    assert defined_early & counted_late, "no stack repeated across five seconds (the spinning chain's at least)"
    assert not again, f"{len(again)} stacks acknowledged two batches ago were defined again"


def _command(sess, cid, **kind):
    sess.send(pb.ServerMessage(command=pb.Command(id=cid, **kind)))
    _, res = _get(sess.results, 10, f"result of {cid}")
    assert res.command_id == cid
    return res


def test_inspect_function_returns_vfs_read_instructions(agent):
    fn = next(f for f in agent.catalog.values() if f.name == "vfs_read")
    res = _command(
        agent.session, "c-1", inspect_function=pb.InspectFunction(digest=agent.vmlinux.digest, function_index=fn.index)
    )
    assert res.ok, res.error
    d = res.disassembly
    assert d.digest == agent.vmlinux.digest and d.function_index == fn.index
    assert d.address == agent.vmlinux.base_address + fn.offset
    assert d.instructions[0].offset == 0
    last = d.instructions[-1]
    assert last.offset + last.length == fn.size
    pos = 0
    for insn in d.instructions:
        assert insn.offset == pos and len(insn.bytes) == insn.length and insn.text
        pos += insn.length
    starts = {i.offset for i in d.instructions}
    assert {b.offset for b in fn.blocks} <= starts


def test_bad_commands_fail_with_a_clear_error(agent):
    sess = agent.session
    res = _command(
        sess, "c-2", inspect_function=pb.InspectFunction(digest=agent.vmlinux.digest, function_index=1 << 30)
    )
    assert not res.ok and "out of range" in res.error
    res = _command(sess, "c-3", inspect_function=pb.InspectFunction(digest="0" * 64, function_index=0))
    assert not res.ok and "no target of this agent has the module" in res.error
    res = _command(sess, "c-4")
    assert not res.ok and res.error == "unsupported command"
    time.sleep(0.5)
    assert sess.results.empty(), "exactly one result per command"


def test_agent_reconnects_after_the_server_cancels_and_resends_what_was_not_acknowledged(agent):
    """Batches the server never acknowledged are sent again, with their numbers, after a reconnect;
    acknowledged ones (also those a Welcome acknowledges) are not."""
    old = agent.session
    agent.backend.auto_ack = False
    _drain(old.raw_metrics)
    unacked = [_get(old.raw_metrics, 5, "unacknowledged batch") for _ in range(3)]
    agent.backend.auto_ack = True
    old.cancel()
    cancelled_at = time.monotonic()
    sess = _get(agent.backend.sessions, 10, "reconnection")
    t, hello = _get(sess.hello, 5, "Hello on the new stream")
    assert t - cancelled_at < 5, "reconnect should use the short backoff after a welcomed session"
    assert hello.modules[0].digest == agent.vmlinux.digest, "same kernel, same digest"
    assert hello.instance_id == agent.hello.instance_id, "same run of the agent, same numbering"
    # Acknowledge the first of the three in the Welcome: only the other two may come again.
    first = unacked[0]
    sess.send(
        pb.ServerMessage(
            welcome=pb.Welcome(
                session_id="s-2", missing_digests=[], acks=[pb.Ack(instance_id=hello.instance_id, seq=first.seq)]
            )
        )
    )
    resent = [_get(sess.raw_metrics, 5, "resent batch") for _ in range(2)]
    assert [m.seq for m in resent] == [m.seq for m in unacked[1:]]
    assert [m.metrics.interval_start_unix_ns for m in resent] == [m.metrics.interval_start_unix_ns for m in unacked[1:]]
    fresh = _get(sess.raw_metrics, 5, "new batch on the new stream")
    assert fresh.seq > unacked[-1].seq
    assert sess.chunks.empty(), "no catalog chunks when nothing is missing"
    assert "UNAVAILABLE" in agent.log()
    agent.session = sess


PAUSE_S = 60  # twice the send bound the agent had when a loaded backend cut its streams (30 s)


def test_a_backend_that_reads_nothing_for_a_minute_keeps_the_stream(agent):
    """A loaded backend may read nothing from a stream for a while. The agent's sends then wait on
    HTTP/2 flow control; its keepalive pings are still answered by the backend's transport, so the stream
    is alive and is not cut: when reading resumes, the same stream carries the whole catalog the backend
    asked for just before it stopped (far more than flow control lets the agent send unread), and no
    reconnect happened."""
    sess = agent.session
    _drain(sess.chunks)
    agent.backend.reading.clear()
    try:
        sess.send(pb.ServerMessage(catalog_request=pb.CatalogRequest(digests=[agent.vmlinux.digest])))
        time.sleep(PAUSE_S)
        assert sess.chunks.empty(), "the stand-in read nothing while paused"
    finally:
        resumed = time.monotonic()
        agent.backend.reading.set()
    seq, total, size = 0, 0, 0
    while True:
        t, chunk = _get(sess.chunks, 120, f"catalog chunk {seq} after reading resumed")
        assert chunk.digest == agent.vmlinux.digest and chunk.seq == seq
        total += len(chunk.functions)
        size += chunk.ByteSize()
        seq += 1
        if chunk.last:
            break
    assert total == agent.vmlinux.function_count, "the whole catalog, once"
    assert size > 8 << 20, f"the catalog ({size} bytes) is more than a stream's flow-control window holds unread"
    print(f"\n{seq} chunks ({size >> 20} MiB) after {PAUSE_S} s unread, the last {t - resumed:.1f} s after it resumed")
    assert not sess.ended.is_set(), "the stream is the same one"
    assert agent.backend.sessions.empty(), "no reconnect"
    assert "made no progress" not in agent.log() and "keepalive" not in agent.log().lower()
    for q in (sess.raw_metrics, sess.metrics):  # all acknowledged as they came; the next test wants fresh ones
        _drain(q)


def test_sigterm_exits_promptly_and_keeps_unacknowledged_data_on_disk(agent):
    agent.backend.auto_ack = False
    # A batch the reader queued before auto_ack was cleared may have been acknowledged: leave those out, as
    # the reconnect test does (a fresh run took two such batches as unacknowledged and found none spooled).
    # The reader queues a batch before it reads auto_ack, so every batch queued after this is unacknowledged.
    _drain(agent.session.raw_metrics)
    for _ in range(2):
        _get(agent.session.raw_metrics, 5, "unacknowledged batch")
    agent.proc.send_signal(signal.SIGTERM)
    try:
        code = agent.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pytest.fail("hotpathd did not exit within 5 s of SIGTERM")
    assert code == 0
    assert agent.session.ended.wait(5), "the stream was not closed"
    spooled = sorted((agent.state / "spool").glob("*.pb"))
    assert len(spooled) >= 2, "unacknowledged batches must survive a restart"
    for f in spooled:
        assert f.stat().st_mode & 0o777 == 0o600
        m = pb.AgentMessage.FromString(f.read_bytes())
        assert m.WhichOneof("kind") == "metrics" and m.seq > 0 and m.instance_id == agent.hello.instance_id
