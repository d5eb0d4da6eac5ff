# SPDX-License-Identifier: Apache-2.0
"""Targets, commands and measurements of the real hotpathd, driven over its stream by the scripted
backend stand-in of test_stream.py: a process the test compiles and starts is attached, its code
catalog arrives under the digest the backend recomputes, a measurement counts exactly what the
process did, the process's exit ends the measurement and keeps its data, commands run on a worker
while metric intervals keep flowing, commands are idempotent and cancellable, and a restarted agent
arms its measurements again from its state folder (or reports that their process is gone).

The tests run in file order against one agent, like the stream test."""

import os
import pathlib
import signal
import subprocess
import time
import uuid

import pytest
from hotpath.v1 import agent_pb2 as pb
from test_stream import GOOD_TOKEN, AgentRun, _get, standin_servers

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"


def compile_threads(out_dir: pathlib.Path) -> pathlib.Path:
    """The replacement fixture (threads.c over group.c), compiled by gcc with a GNU build id."""
    out = out_dir / "threads"
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-g",
            "-pthread",
            "-Wl,--build-id",
            f"-I{FIXTURES}",
            "-o",
            str(out),
            str(FIXTURES / "threads.c"),
        ],
        check=True,
    )
    return out


# Short intervals, so a stalled stream loop shows as a gap several intervals long.
INTERVAL_MS = 300
# How long a wait for what is bound to happen (an interval with counts, a measurement's last batch) may
# take before it is called a hang: not a speed check, a passing test goes on as soon as it holds. Three
# test runs at once beside four other sessions' builds and kernel lanes (load average 30 on 2 cores)
# made a measurement of a function probed at every block, called by 8 busy threads, send its first 3
# intervals 41 s after it was armed, and none in 20 s in another run; the waits were 5-30 s then.
HANG_S = 180


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """The measured fixture and the 10,000-block fixture, compiled by gcc (with a GNU build id)."""
    out = tmp_path_factory.mktemp("programs")
    subprocess.run(
        ["gcc", "-O2", "-g", "-pthread", "-Wl,--build-id", "-o", str(out / "measured"), str(FIXTURES / "measured.c")],
        check=True,
    )
    subprocess.run(
        ["gcc", "-O0", "-Wl,--build-id", "-o", str(out / "many"), str(FIXTURES / "manyblocks.c")], check=True
    )
    return out


STARTED: list[subprocess.Popen] = []  # killed when the module's agent goes


class Fixture:
    """A started fixture process that printed its first line."""

    def __init__(self, path: pathlib.Path, *args: str):
        self.proc = subprocess.Popen([str(path), *args], stdout=subprocess.PIPE, text=True)
        STARTED.append(self.proc)
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", line

    @property
    def pid(self) -> int:
        return self.proc.pid

    def finish(self, timeout: float = 20) -> str:
        out, _ = self.proc.communicate(timeout=timeout)
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _start_agent(hotpathd, standin, state: pathlib.Path, log_path: pathlib.Path, *extra: str) -> AgentRun:
    backend, port, enroll_port, ca = standin
    token_file = state.parent / "token"
    token_file.write_text(GOOD_TOKEN + "\n")
    env = dict(os.environ)
    env.pop("HOTPATH_ENROLL_TOKEN", None)
    with open(log_path, "a") as log:
        proc = subprocess.Popen(
            [
                str(hotpathd),
                "run",
                "--server",
                f"127.0.0.1:{port}",
                "--enroll-server",
                f"127.0.0.1:{enroll_port}",
                "--state-dir",
                str(state),
                "--enroll-token-file",
                str(token_file),
                "--ca-file",
                str(ca),
                "--interval-ms",
                str(INTERVAL_MS),
                *extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    run = AgentRun(proc, log_path, backend)
    run.state = state
    run.session = _get(backend.sessions, 90, "accepted stream")
    _, run.hello = _get(run.session.hello, 10, "Hello")
    run.session.send(pb.ServerMessage(welcome=pb.Welcome(session_id=str(uuid.uuid4()))))
    return run


def _stop_agent(run: AgentRun) -> None:
    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(timeout=15) == 0, run.log()[-2000:]


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    yield from standin_servers(tmp_path_factory.mktemp("standin"))


@pytest.fixture(scope="module")
def agent(hotpathd, standin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("measure-stream")
    run = _start_agent(hotpathd, standin, tmp / "state", tmp / "agent.log")
    run.tmp = tmp
    yield run
    for proc in [run.proc, *STARTED]:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _send(sess, cid: str, **kind) -> None:
    sess.send(pb.ServerMessage(command=pb.Command(id=cid, **kind)))


def _result(sess, cid: str, timeout: float = HANG_S) -> pb.CommandResult:
    """The result of command cid (results of other commands that arrive meanwhile are kept)."""
    deadline = time.monotonic() + timeout
    for res in list(getattr(sess, "stash", [])):
        if res.command_id == cid:
            sess.stash.remove(res)
            return res
    while True:
        _, res = _get(sess.results, max(0.1, deadline - time.monotonic()), f"result of {cid}")
        if res.command_id == cid:
            return res
        sess.stash = [*getattr(sess, "stash", []), res]


def _others(sess, kind: str) -> list:
    """Drain the session's other messages, keeping those of one kind."""
    out, keep = [], []
    while not sess.other.empty():
        t, m = sess.other.get()
        (out if isinstance(m, getattr(pb, kind)) else keep).append((t, m))
    for item in keep:
        sess.other.put(item)
    return out


def _catalog(sess, digest: str) -> dict[int, pb.Function]:
    sess.send(pb.ServerMessage(catalog_request=pb.CatalogRequest(digests=[digest])))
    functions: dict[int, pb.Function] = {}
    seq = 0
    while True:
        _, chunk = _get(sess.chunks, 30, f"catalog chunk {seq} of {digest[:12]}")
        if chunk.digest != digest:
            continue
        assert chunk.seq == seq
        for f in chunk.functions:
            functions[f.index] = f
        seq += 1
        if chunk.last:
            return functions


def _measurement_batches(sess, mid: str, timeout: float, until=None) -> list[pb.MeasurementBatch]:
    """Measurement batches of one measurement until `until(batches)` holds or the time is up."""
    got: list[pb.MeasurementBatch] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _, m in _others(sess, "MeasurementBatch"):
            if m.measurement_id == mid:
                got.append(m)
        if until is not None and until(got):
            return got
        time.sleep(0.1)
    return got


def _totals(batches, metric=pb.METRIC_COUNT) -> dict[int, float]:
    sums: dict[int, float] = {}
    for b in batches:
        for rv in b.resources:
            for v in rv.values:
                if v.metric == metric:
                    sums[rv.resource] = sums.get(rv.resource, 0) + (v.total or v.value)
    return sums


def test_attach_a_process_by_pid_announces_a_target_with_its_modules(agent, programs):
    fixture = Fixture(programs / "measured", "calls", "1000")
    agent.fixture = fixture
    assert [t.id for t in agent.hello.targets] == ["kernel"]
    _send(agent.session, "attach-1", attach_target=pb.AttachTarget(pid=fixture.pid))
    res = _result(agent.session, "attach-1")
    assert res.ok, res.error
    [target] = res.targets.targets
    assert target.kind == pb.TARGET_KIND_PROCESS and target.pid == fixture.pid
    assert target.id.startswith(f"p{fixture.pid}-") and target.command == "measured"
    assert target.state == pb.TARGET_STATE_ATTACHED
    main = next(m for m in target.modules if m.name.endswith("/measured"))
    assert len(main.build_id) == 40, "gcc gave the program a GNU build id"
    assert main.function_count > 0 and len(main.digest) == 64
    # The whole list follows as a TargetsUpdate, so the backend can ask for the new pieces.
    updates = [m for _, m in _others(agent.session, "TargetsUpdate")]
    assert updates and any(t.id == target.id for t in updates[-1].targets)
    agent.target, agent.main = target, main


def test_a_process_modules_catalog_hashes_to_its_digest_with_its_build_id(agent):
    from app.protocol.catalog_digest import piece_digest

    functions = _catalog(agent.session, agent.main.digest)
    assert len(functions) == agent.main.function_count
    ordered = [functions[i] for i in range(len(functions))]
    build = "elf:" + agent.main.build_id
    assert piece_digest(build, agent.main.name, agent.main.base_address, ordered) == agent.main.digest
    # Its named call targets agree with the functions they name (the backend refuses a piece otherwise).
    from app.storage.catalog import TargetCheck, check_targets, function_rows

    targets = TargetCheck(agent.main.name)
    for _ in function_rows("check", agent.main.base_address, ordered, targets):
        pass
    problem, _unchecked = check_targets(targets)
    assert problem is None, problem
    assert targets.pending, "mx_call calls functions of its own binary"
    agent.functions = {f.name: f for f in ordered}
    assert "mx_branch" in agent.functions and "mx_call" in agent.functions


def test_the_same_binary_in_two_processes_names_one_catalog(agent, programs):
    other = Fixture(programs / "measured", "calls", "5")
    try:
        _send(agent.session, "attach-2", attach_target=pb.AttachTarget(pid=other.pid))
        res = _result(agent.session, "attach-2")
        assert res.ok, res.error
        [t2] = res.targets.targets
        main2 = next(m for m in t2.modules if m.name.endswith("/measured"))
        assert main2.digest == agent.main.digest and t2.id != agent.target.id
        libc = {m.name: m.digest for m in agent.target.modules if "libc" in m.name}
        assert libc and all(libc[m.name] == m.digest for m in t2.modules if m.name in libc)
        _send(agent.session, "detach-2", detach_target=pb.DetachTarget(target=t2.id))
        res = _result(agent.session, "detach-2")
        assert res.ok and res.targets.targets[0].state == pb.TARGET_STATE_DETACHED
    finally:
        other.kill()


def _resource(agent, name: str, kind=pb.RESOURCE_KIND_FUNCTION, offset=0, blocks=False) -> pb.ResourceRef:
    f = agent.functions[name]
    return pb.ResourceRef(digest=agent.main.digest, function_index=f.index, kind=kind, offset=offset, blocks=blocks)


def test_a_measurement_counts_exactly_and_ends_with_the_process_keeping_its_data(agent):
    mid = "m-exact"
    _send(
        agent.session,
        "start-1",
        start_measurement=pb.StartMeasurement(
            measurement_id=mid,
            target=agent.target.id,
            metrics=["count", "wall", "vtime"],
            resources=[_resource(agent, "mx_branch", blocks=True), _resource(agent, "mx_call")],
        ),
    )
    res = _result(agent.session, "start-1")
    assert res.ok, res.error
    info = res.measurement
    assert info.measurement_id == mid and info.state == pb.MEASUREMENT_STATE_ARMED
    rows = list(info.resources)
    branch = agent.functions["mx_branch"]
    assert rows[0].kind == pb.RESOURCE_KIND_FUNCTION and rows[0].function == "mx_branch"
    block_rows = [r for r in rows if r.kind == pb.RESOURCE_KIND_BLOCK]
    assert block_rows and all(r.function_row == 1 and r.digest == agent.main.digest for r in block_rows)
    assert {r.block_offset for r in block_rows} <= {b.offset for b in branch.blocks}
    plans = {p.metric: p for p in rows[0].metrics}
    assert plans[pb.METRIC_COUNT].available and plans[pb.METRIC_COUNT].label == pb.VALUE_LABEL_EXACT
    assert plans[pb.METRIC_COUNT].unit == "calls" and "uprobe" in plans[pb.METRIC_COUNT].mechanism
    # Armed, nothing ran: release the fixture (1000 calls, then it exits).
    time.sleep(1.2)
    os.kill(agent.fixture.pid, signal.SIGUSR1)
    assert "1000" in agent.fixture.finish()
    batches = _measurement_batches(
        agent.session, mid, HANG_S, until=lambda bs: any(b.state == pb.MEASUREMENT_STATE_TARGET_EXITED for b in bs)
    )
    assert batches and batches[-1].state == pb.MEASUREMENT_STATE_TARGET_EXITED, [b.state for b in batches]
    assert "exited" in batches[-1].detail
    counts = _totals(batches)
    calls = next(i for i, r in enumerate(rows) if r.function == "mx_call" and r.kind == pb.RESOURCE_KIND_FUNCTION)
    assert counts[0] == 1000 and counts[calls] == 1000
    split = sorted(counts.get(i, 0) for i, r in enumerate(rows) if r.kind == pb.RESOURCE_KIND_BLOCK)
    assert 250 in split and 750 in split, split
    # Each batch carries the edges the agent derives from that interval's exact block counts (KernInst
    # section 4): exact-derived, between CFG successors of mx_branch, with the calls entering and
    # returning and the 250/750 split on the two sides of the branch.
    succ = {
        (b.offset, s.target)
        for b in branch.blocks
        for s in b.successors
        if s.kind in (pb.SUCCESSOR_KIND_FALLTHROUGH, pb.SUCCESSOR_KIND_TAKEN)
    }
    edges: dict[tuple[int, int, int], int] = {}
    for b in batches:
        for e in b.edges:
            assert e.function_row == 0 and e.label == pb.EDGE_LABEL_EXACT_DERIVED, e
            if e.kind in (pb.EDGE_KIND_FALLTHROUGH, pb.EDGE_KIND_TAKEN):
                assert (e.from_offset, e.to_offset) in succ, e
            key = (e.kind, e.from_offset, e.to_offset)
            edges[key] = edges.get(key, 0) + e.count
    assert sum(c for (k, _, _), c in edges.items() if k == pb.EDGE_KIND_ENTRY) == 1000, edges
    assert sum(c for (k, _, _), c in edges.items() if k == pb.EDGE_KIND_RETURN) == 1000, edges
    inner = sorted(c for (k, _, _), c in edges.items() if k in (pb.EDGE_KIND_FALLTHROUGH, pb.EDGE_KIND_TAKEN))
    assert 250 in inner and 750 in inner, edges
    wall = _totals(batches, pb.METRIC_WALL_NS)
    assert wall[0] > 0 and _totals(batches, pb.METRIC_VTIME_NS)[0] > 0
    for b in batches:
        for rv in b.resources:
            for v in rv.values:
                assert b.units[v.unit] and v.label == pb.VALUE_LABEL_EXACT and b.mechanisms[v.mechanism]
    # The target ended too, and says why.
    deadline = time.monotonic() + 5
    ended = None
    while time.monotonic() < deadline and ended is None:
        for _, u in _others(agent.session, "TargetsUpdate"):
            ended = next((t for t in u.targets if t.id == agent.target.id and t.state == pb.TARGET_STATE_EXITED), ended)
        time.sleep(0.1)
    assert ended is not None and "exited" in ended.detail
    assert not list((agent.state / "measurements").glob(f"{mid}.pb")), "an ended measurement is not re-armed"


BIG_LIBRARIES = ("libLLVM-1*.so.1", "libclang-cpp.so.1*", "libLLVM.so.1*")


def _big_library_holder() -> subprocess.Popen:
    """A process mapping the largest shared libraries on this machine (clang's LLVM, a build
    dependency of the agent), so attaching it parses a few hundred MiB of code: a slow command."""
    libdir = pathlib.Path("/usr/lib/x86_64-linux-gnu")
    libs = sorted({str(p) for pattern in BIG_LIBRARIES for p in libdir.glob(pattern)})
    assert libs, "clang's libLLVM is installed with the agent's build dependencies"
    code = (
        "import ctypes, sys, time\nfor lib in sys.argv[1:]: ctypes.CDLL(lib)\n"
        "print('ready', flush=True)\ntime.sleep(600)"
    )
    proc = subprocess.Popen(["python3", "-c", code, *libs], stdout=subprocess.PIPE, text=True)
    STARTED.append(proc)
    assert proc.stdout.readline().strip() == "ready"
    return proc


PLAN_S = 8  # the slow command of the test below: twice its stall bound (half the command) is 8 s on any machine


def _check_no_stall(arrivals, loop_batches, t0, took, what):
    """Metric intervals (arrival times) and the running measurement's batches kept coming while a command
    ran from t0 for `took` seconds. An interval is 0.3 s; a command run on the stream loop would leave one
    gap as long as the whole command (no interval until it ends), while a loaded machine delays intervals
    and thins them out: 1.5 s gaps at load 13, which a fixed 1.2 s bound failed, and 138 intervals in an
    89 s command at load 15, where 296 were due and half were asked for. So the bound comes from the
    command's own time: no gap may reach half of it (intervals came in both halves of the command), and
    the running measurement sent batches."""
    gaps = [b - a for a, b in zip([t0, *arrivals], [*arrivals, t0 + took], strict=False)]
    assert max(gaps) < took / 2, f"metric intervals stalled for {max(gaps):.1f} s while {what} ({took:.1f} s)"
    assert loop_batches and sum(_totals(loop_batches).values()) > 0, (what, len(loop_batches))


def test_commands_run_on_a_worker_while_intervals_keep_flowing(agent, programs):
    """A slow command does not hold up the metric intervals, nor the intervals of a measurement already
    running: attaching a process that maps LLVM (seconds of parsing here, reporting progress), and a plan
    that counts blocks for a set time (PLAN_S of wall time on any machine, so the check does not rest on
    how fast this one parses)."""
    loop = Fixture(programs / "measured", "loop")
    holder = _big_library_holder()
    try:
        _send(agent.session, "attach-loop", attach_target=pb.AttachTarget(pid=loop.pid))
        loop_target = _result(agent.session, "attach-loop").targets.targets[0]
        loop_main = next(m for m in loop_target.modules if m.name.endswith("/measured"))
        loop_call = agent.functions["mx_call"]
        # The tests below use this process and its measurement: kept before any check here can fail, so
        # that a failure here is this test's alone.
        agent.loop, agent.loop_target, agent.loop_main = loop, loop_target, loop_main
        _send(
            agent.session,
            "start-loop",
            start_measurement=pb.StartMeasurement(
                measurement_id="m-loop",
                target=loop_target.id,
                metrics=["count"],
                resources=[
                    pb.ResourceRef(
                        digest=loop_main.digest, function_index=loop_call.index, kind=pb.RESOURCE_KIND_FUNCTION
                    )
                ],
            ),
        )
        assert _result(agent.session, "start-loop").ok
        _measurement_batches(agent.session, "m-loop", HANG_S, until=lambda bs: len(bs) >= 1)
        while not agent.session.metrics.empty():
            agent.session.metrics.get()
        t0 = time.monotonic()
        _send(agent.session, "attach-big", attach_target=pb.AttachTarget(pid=holder.pid))
        res = _result(agent.session, "attach-big", timeout=300)
        took = time.monotonic() - t0
        assert res.ok, res.error
        print(f"attaching a process that maps LLVM took {took:.1f} s")
        arrivals = []
        while not agent.session.metrics.empty():
            arrivals.append(agent.session.metrics.get()[0])
        arrivals = [t for t in arrivals if t <= t0 + took]
        loop_batches = _measurement_batches(agent.session, "m-loop", 0.5)
        # How long parsing LLVM takes depends on the machine: where it is too quick for half of it to
        # stand well above a loaded machine's delays, the plan below (PLAN_S on any machine) tells alone.
        if took >= PLAN_S:
            _check_no_stall(arrivals, loop_batches, t0, took, "attaching a process that maps LLVM")
        else:
            print(f"attaching took {took:.1f} s, under {PLAN_S} s: too quick to tell a stall; the plan tells")
        progress = [m for _, m in _others(agent.session, "Progress") if m.command_id == "attach-big"]
        assert progress and all(0 <= p.fraction <= 1 and p.message for p in progress)
        big = res.targets.targets[0]
        _send(agent.session, "detach-big", detach_target=pb.DetachTarget(target=big.id))
        assert _result(agent.session, "detach-big").ok
        # A plan of the loop's function counts its blocks for PLAN_S seconds of wall time on the worker.
        while not agent.session.metrics.empty():
            agent.session.metrics.get()
        _measurement_batches(agent.session, "m-loop", 0.5)
        t0 = time.monotonic()
        _send(
            agent.session,
            "plan-slow",
            make_plan=pb.MakePlan(
                plan_id="plan-slow",
                target=loop_target.id,
                digest=loop_main.digest,
                function_index=loop_call.index,
                seconds=PLAN_S,
            ),
        )
        res = _result(agent.session, "plan-slow", timeout=300)
        took = time.monotonic() - t0
        assert res.ok, res.error
        assert took >= PLAN_S, f"the plan answered in {took:.1f} s, before its {PLAN_S} s of counting"
        arrivals = []
        while not agent.session.metrics.empty():
            arrivals.append(agent.session.metrics.get()[0])
        arrivals = [t for t in arrivals if t <= t0 + took]
        _check_no_stall(
            arrivals,
            _measurement_batches(agent.session, "m-loop", 0.5),
            t0,
            took,
            f"a plan counting blocks for {PLAN_S} s",
        )
    finally:
        holder.kill()
        holder.wait()


def test_ten_thousand_resources_in_one_request_are_served(agent, programs):
    many = subprocess.Popen([str(programs / "many")], stdout=subprocess.PIPE, text=True)
    STARTED.append(many)
    try:
        assert many.stdout.readline().strip() == "ready"
        _send(agent.session, "attach-many", attach_target=pb.AttachTarget(command="many"))
        res = _result(agent.session, "attach-many")
        assert res.ok, res.error
        many_target = next(t for t in res.targets.targets if t.pid == many.pid)
        many_main = next(m for m in many_target.modules if m.name.endswith("/many"))
        fns = _catalog(agent.session, many_main.digest)
        mb = next(f for f in fns.values() if f.name == "mb_many")
        assert len(mb.blocks) > 10000
        big = [
            pb.ResourceRef(
                digest=many_main.digest, function_index=mb.index, kind=pb.RESOURCE_KIND_BLOCK, offset=b.offset
            )
            for b in mb.blocks[1:10001]
        ]
        _send(
            agent.session,
            "start-big",
            start_measurement=pb.StartMeasurement(
                measurement_id="m-big", target=many_target.id, metrics=["count"], resources=big
            ),
        )
        res = _result(agent.session, "start-big", timeout=180)
        assert res.ok, res.error
        assert len(res.measurement.resources) == 10000
        batches = _measurement_batches(agent.session, "m-big", HANG_S, until=lambda bs: sum(_totals(bs).values()) > 0)
        assert sum(_totals(batches).values()) > 0
        for mid in ("m-big", "m-loop"):
            _send(agent.session, f"stop-{mid}", stop_measurement=pb.StopMeasurement(measurement_id=mid))
            res = _result(agent.session, f"stop-{mid}")
            assert res.ok and res.measurement.state == pb.MEASUREMENT_STATE_STOPPED
            # The measurement's last interval reached the stream before the stop's result (a backend
            # showing the window ended must already have its last interval).
            order = agent.session.arrived
            last = f"{mid}:{pb.MEASUREMENT_STATE_STOPPED}"
            at_batch = next((i for i, a in enumerate(order) if a == ("measurement", last)), None)
            at_result = order.index(("result", f"stop-{mid}"))
            assert at_batch is not None and at_batch < at_result, (
                f"{mid}'s last interval arrived at {at_batch}, the stop's result at {at_result}"
            )
        last = _measurement_batches(
            agent.session, "m-loop", HANG_S, until=lambda bs: any(b.state == pb.MEASUREMENT_STATE_STOPPED for b in bs)
        )
        assert last and last[-1].state == pb.MEASUREMENT_STATE_STOPPED
        _send(agent.session, "detach-many", detach_target=pb.DetachTarget(target=many_target.id))
        assert _result(agent.session, "detach-many").ok
    finally:
        many.kill()
        many.wait()


def test_a_command_id_runs_once_and_its_result_is_sent_again(agent):
    _send(agent.session, "stop-again", stop_measurement=pb.StopMeasurement(measurement_id="m-loop"))
    first = _result(agent.session, "stop-again")
    _send(agent.session, "stop-again", stop_measurement=pb.StopMeasurement(measurement_id="m-loop"))
    again = _result(agent.session, "stop-again")
    assert again.SerializeToString() == first.SerializeToString()
    _send(agent.session, "start-1", start_measurement=pb.StartMeasurement(measurement_id="other"))
    res = _result(agent.session, "start-1")
    assert res.ok and res.measurement.measurement_id == "m-exact", "the first start-1's result, not a new run"


def test_cancel_drops_a_queued_command_and_answers_for_both(agent, programs):
    many = subprocess.Popen([str(programs / "many")], stdout=subprocess.PIPE, text=True)
    STARTED.append(many)
    try:
        assert many.stdout.readline().strip() == "ready"
        _send(agent.session, "slow-attach", attach_target=pb.AttachTarget(pid=many.pid))
        _send(agent.session, "queued-attach", attach_target=pb.AttachTarget(pid=agent.loop.pid))
        _send(agent.session, "cancel-1", cancel=pb.CancelCommand(command_id="queued-attach"))
        res = _result(agent.session, "cancel-1")
        cancelled = _result(agent.session, "queued-attach")
        assert res.ok, res.error
        assert cancelled.cancelled and not cancelled.ok and "cancelled" in cancelled.error
        assert _result(agent.session, "slow-attach").ok
        _send(agent.session, "cancel-2", cancel=pb.CancelCommand(command_id="no-such-command"))
        res = _result(agent.session, "cancel-2")
        assert not res.ok and "neither queued nor running" in res.error
    finally:
        many.kill()
        many.wait()


def test_bad_measurement_requests_are_refused_with_the_reason(agent):
    sess = agent.session
    loop_call = agent.functions["mx_call"]
    ref = pb.ResourceRef(digest=agent.loop_main.digest, function_index=loop_call.index, kind=pb.RESOURCE_KIND_FUNCTION)
    cases = {
        "no target": (
            pb.StartMeasurement(measurement_id="b1", target="p1-1", metrics=["count"], resources=[ref]),
            "no target",
        ),
        "bad id": (
            pb.StartMeasurement(measurement_id="../x", target=agent.loop_target.id, metrics=["count"], resources=[ref]),
            "measurement id",
        ),
        "no metric": (
            pb.StartMeasurement(measurement_id="b2", target=agent.loop_target.id, metrics=["bogus"], resources=[ref]),
            "unknown metric",
        ),
        "pmu": (
            pb.StartMeasurement(measurement_id="b3", target=agent.loop_target.id, metrics=["cycles"], resources=[ref]),
            "cycles",
        ),
        "inside a block": (
            pb.StartMeasurement(
                measurement_id="b4",
                target=agent.loop_target.id,
                metrics=["count"],
                resources=[
                    pb.ResourceRef(
                        digest=agent.loop_main.digest,
                        function_index=loop_call.index,
                        kind=pb.RESOURCE_KIND_ADDRESS,
                        offset=1,
                    )
                ],
            ),
            "not the start of a basic block",
        ),
        "unknown module": (
            pb.StartMeasurement(
                measurement_id="b5",
                target=agent.loop_target.id,
                metrics=["count"],
                resources=[pb.ResourceRef(digest="0" * 64, function_index=0, kind=pb.RESOURCE_KIND_FUNCTION)],
            ),
            "no module",
        ),
    }
    for name, (req, needle) in cases.items():
        _send(sess, f"bad-{name}", start_measurement=req)
        res = _result(sess, f"bad-{name}")
        assert not res.ok and needle in res.error, (name, res.error)


def test_a_restarted_agent_arms_its_measurements_again_from_the_state_folder(agent, hotpathd, standin):
    sess = agent.session
    loop_call = agent.functions["mx_call"]
    _send(
        sess,
        "start-keep",
        start_measurement=pb.StartMeasurement(
            measurement_id="m-keep",
            target=agent.loop_target.id,
            metrics=["count", "wall"],
            resources=[
                pb.ResourceRef(
                    digest=agent.loop_main.digest, function_index=loop_call.index, kind=pb.RESOURCE_KIND_FUNCTION
                )
            ],
        ),
    )
    info = _result(sess, "start-keep").measurement
    assert _measurement_batches(sess, "m-keep", HANG_S, until=lambda bs: len(bs) >= 1)
    assert (agent.state / "measurements" / "m-keep.pb").exists()
    _stop_agent(agent)
    restarted = _start_agent(hotpathd, standin, agent.state, agent.tmp / "agent.log")
    agent.proc, agent.session, agent.hello = restarted.proc, restarted.session, restarted.hello
    targets = {t.id: t for t in agent.hello.targets}
    assert agent.loop_target.id in targets and targets[agent.loop_target.id].state == pb.TARGET_STATE_ATTACHED
    kept = {m.measurement_id: m for m in agent.hello.measurements}
    assert "m-keep" in kept and kept["m-keep"].state in (pb.MEASUREMENT_STATE_ARMED, pb.MEASUREMENT_STATE_RUNNING)
    assert [(r.digest, r.function_index, r.kind) for r in kept["m-keep"].resources] == [
        (r.digest, r.function_index, r.kind) for r in info.resources
    ]
    assert kept["m-keep"].started_unix_ns == info.started_unix_ns
    batches = _measurement_batches(agent.session, "m-keep", HANG_S, until=lambda bs: sum(_totals(bs).values()) > 100)
    assert sum(_totals(batches).values()) > 100, "the loop calls mx_call every millisecond"


def test_a_measurement_whose_process_exited_while_the_agent_was_down_ends_with_its_data(agent, hotpathd, standin):
    _stop_agent(agent)
    agent.loop.kill()
    restarted = _start_agent(hotpathd, standin, agent.state, agent.tmp / "agent.log")
    agent.proc, agent.session, agent.hello = restarted.proc, restarted.session, restarted.hello
    kept = {m.measurement_id: m for m in agent.hello.measurements}
    assert kept["m-keep"].state == pb.MEASUREMENT_STATE_TARGET_EXITED
    assert "exited while the agent was not running" in kept["m-keep"].detail
    assert agent.loop_target.id not in {t.id for t in agent.hello.targets}
    assert not (agent.state / "measurements" / "m-keep.pb").exists()
    assert not (agent.state / "targets" / agent.loop_target.id).exists()


def test_sampled_kernel_blocks_carry_edges_labelled_sampled_estimates(agent):
    """vfs_read with its blocks on this kernel, which forbids kprobes and fentry: block counts are PC
    samples (labelled sampled) and the edges the agent derives from them are sampled estimates, each an
    edge of vfs_read's CFG, while `dd` reads one byte per read(2)."""
    vmlinux = next(m for m in agent.hello.modules if m.name == "vmlinux")
    vfs_read = next(f for f in _catalog(agent.session, vmlinux.digest).values() if f.name == "vfs_read")
    succ = {
        (b.offset, s.target)
        for b in vfs_read.blocks
        for s in b.successors
        if s.kind in (pb.SUCCESSOR_KIND_FALLTHROUGH, pb.SUCCESSOR_KIND_TAKEN)
    }
    loop = subprocess.Popen(["dd", "if=/dev/zero", "of=/dev/null", "bs=1"], stderr=subprocess.DEVNULL)
    STARTED.append(loop)
    try:
        _send(
            agent.session,
            "start-k",
            start_measurement=pb.StartMeasurement(
                measurement_id="m-kernel-edges",
                target="kernel",
                metrics=["count"],
                allow_partial=True,
                resources=[
                    pb.ResourceRef(
                        digest=vmlinux.digest,
                        function_index=vfs_read.index,
                        kind=pb.RESOURCE_KIND_FUNCTION,
                        blocks=True,
                    )
                ],
            ),
        )
        res = _result(agent.session, "start-k")
        assert res.ok, res.error
        rows = list(res.measurement.resources)
        blocks = [r for r in rows if r.kind == pb.RESOURCE_KIND_BLOCK]
        assert blocks and all(
            {p.metric: p for p in r.metrics}[pb.METRIC_COUNT].label == pb.VALUE_LABEL_SAMPLED for r in blocks
        )
        batches = _measurement_batches(
            agent.session, "m-kernel-edges", HANG_S, until=lambda bs: sum(len(b.edges) for b in bs) >= 3
        )
    finally:
        loop.kill()
        loop.wait()
    _send(agent.session, "stop-k", stop_measurement=pb.StopMeasurement(measurement_id="m-kernel-edges"))
    assert _result(agent.session, "stop-k").ok
    edges = [e for b in batches for e in b.edges]
    assert len(edges) >= 3, f"{len(batches)} batches, {sum(_totals(batches).values())} samples counted"
    for e in edges:
        assert e.function_row == 0 and e.label == pb.EDGE_LABEL_SAMPLED_ESTIMATE and e.count > 0, e
        if e.kind in (pb.EDGE_KIND_FALLTHROUGH, pb.EDGE_KIND_TAKEN):
            assert (e.from_offset, e.to_offset) in succ, e
