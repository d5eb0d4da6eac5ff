# SPDX-License-Identifier: Apache-2.0
"""Plans made, installed and reverted by the real hotpathd over its stream, driven by the scripted
backend stand-in of test_stream.py (a fake backend, because these tests prove the agent's side of the
protocol): a compiled fixture whose threads call pr_root forever and check every result is attached;
MakePlan measures its blocks exactly and answers with the same plan `hotpathd plan` makes from that
profile; an install with a wrong or missing hash, or of an altered plan, changes nothing; the approved
one runs in the process (its copy mapped, results still right) and reverts to the original bytes; an
agent killed in the middle of an install is restarted and leaves nothing half-done; a dead target and
the kernel are refused with their reasons.

The tests run in file order against one agent, like the stream test."""

import json
import pathlib
import re
import signal
import subprocess
import time

import pytest
from hotpath.v1 import agent_pb2 as pb
from test_measurements import (
    HANG_S,
    Fixture,
    _catalog,
    _measurement_batches,
    _others,
    _result,
    _send,
    _start_agent,
    _stop_agent,
    _totals,
    compile_threads,
)
from test_stream import standin_servers

PLAN_SECONDS = 2
# pr_table dispatches through a switch table, which moves with a table of its own in position-independent code
MEMBERS = {"pr_root", "pr_op", "pr_hash", "pr_mix", "pr_fib", "pr_even", "pr_odd", "pr_search", "pr_check", "pr_table"}


@pytest.fixture(scope="module")
def threads_program(tmp_path_factory):
    return compile_threads(tmp_path_factory.mktemp("plan-programs"))


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    yield from standin_servers(tmp_path_factory.mktemp("plan-standin"))


STARTED: list[Fixture] = []


@pytest.fixture(scope="module")
def agent(hotpathd, standin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plan-stream")
    run = _start_agent(hotpathd, standin, tmp / "state", tmp / "agent.log")
    run.tmp = tmp
    yield run
    if run.proc.poll() is None:
        run.proc.kill()
        run.proc.wait()
    for fx in STARTED:
        fx.kill()


def _mem(pid: int, addr: int, n: int) -> bytes:
    with open(f"/proc/{pid}/mem", "rb") as f:
        f.seek(addr)
        return f.read(n)


def _maps(pid: int) -> str:
    return pathlib.Path(f"/proc/{pid}/maps").read_text()


def _text(pid: int) -> bytes:
    """The fixture's own executable code, as the process runs it now."""
    out = b""
    for line in _maps(pid).splitlines():
        f = line.split()
        if len(f) >= 6 and f[1].startswith("r-x") and f[5].endswith("/threads"):
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            out += _mem(pid, lo, hi - lo)
    assert out, "no executable mapping of the fixture"
    return out


def _journals(state: pathlib.Path) -> list[str]:
    d = state / "replace"
    return sorted(p.name for p in d.glob("*.journal")) if d.exists() else []


def _attach(agent, fixture: Fixture, cid: str):
    _send(agent.session, cid, attach_target=pb.AttachTarget(pid=fixture.pid))
    res = _result(agent.session, cid)
    assert res.ok, res.error
    [target] = res.targets.targets
    main = next(m for m in target.modules if m.name.endswith("/threads"))
    return target, main


def _ask_plan(session, command_id: str, drain: bool = True, **fields) -> None:
    """Send MakePlan (its plan_id the command's unless given) with fields; with drain, the Progress read so far
    is dropped first, so what follows is this command's."""
    if drain:
        _others(session, "Progress")
    fields.setdefault("plan_id", command_id)
    _send(session, command_id, make_plan=pb.MakePlan(**fields))


def _alive_and_checking(fixture: Fixture, seconds: float = 0.5) -> None:
    time.sleep(seconds)
    assert fixture.proc.poll() is None, f"the fixture exited with {fixture.proc.returncode}: a wrong result"


def test_attach_the_fixture_and_find_its_root(agent, threads_program):
    fixture = Fixture(threads_program, "threads", "2")
    STARTED.append(fixture)
    agent.fixture = fixture
    agent.target, agent.main = _attach(agent, fixture, "attach-plan")
    functions = {f.name: f for f in _catalog(agent.session, agent.main.digest).values()}
    assert set(functions) >= MEMBERS
    agent.root = functions["pr_root"]


def test_make_plan_counts_the_root_group_inline_and_answers_a_verified_plan_with_progress(agent):
    """The root and its direct callees are counted by inline counters (counted copies installed, read
    live, reverted): no trap per block; the process's code is byte for byte what it was after the plan."""
    text = _text(agent.fixture.pid)
    _ask_plan(
        agent.session,
        "plan-1",
        target=agent.target.id,
        digest=agent.main.digest,
        function_index=agent.root.index,
        seconds=PLAN_SECONDS,
    )
    res = _result(agent.session, "plan-1", timeout=120)
    assert res.ok, res.error
    assert res.WhichOneof("kind") == "plan" and res.plan.plan_id == "plan-1"
    plan = json.loads(res.plan.plan_json)
    assert plan["status"] == "ok" and plan["root"] == "pr_root"
    assert plan["code"]["verified"] is True
    assert res.plan.code_sha256 == plan["code"]["sha256"] and len(res.plan.code_sha256) == 64
    assert res.plan.build_id == agent.main.build_id == plan["target"]["module_build_id"]
    assert plan["target"]["pid"] == agent.fixture.pid
    assert plan["profile"]["estimated"] is False, "inline counters count a process's blocks exactly"
    source = plan["profile"]["source"]
    # All but pr_even are counted inline, pr_root too, which calls the others: its counted copy carries its own
    # unwind data, so the fixture's backtraces through it (checked in every result, the fixture exits on a wrong
    # one) stay right. pr_even, whose entry jump would cover its block at +4, is counted by uprobes in the same
    # window. The source says which.
    assert source.startswith(
        f"{PLAN_SECONDS} s of exact block counts (inline counters) in process {agent.fixture.pid}; uprobes in the "
        "same window for pr_even ("
    ), source
    assert "pr_root" not in source and "pr_op" not in source and "pr_table" not in source
    _alive_and_checking(agent.fixture)
    assert {f["name"] for f in plan["profile"]["functions"]} >= {"pr_root", "pr_op", "pr_table", "pr_even"}
    assert _text(agent.fixture.pid) == text, "every counted copy reverted: the code is the original"
    assert _journals(agent.state) == []
    group = [g["function"] for g in plan["group"]]
    assert group[0] == "pr_root" and len(group) > 1 and set(group) <= MEMBERS
    # Progress: every phase said what it does, with a fraction that never goes back.
    progress = [m for _, m in _others(agent.session, "Progress") if m.command_id == "plan-1"]
    assert len(progress) >= PLAN_SECONDS + 3, [p.message for p in progress]
    fractions = [p.fraction for p in progress]
    assert fractions == sorted(fractions) and all(0 <= f <= 1 for f in fractions)
    n = len(plan["profile"]["functions"])
    assert any(
        f"counting {n} functions' blocks exactly (inline counters, uprobes for the rest): 1 of" in p.message
        for p in progress
    ), ([p.message for p in progress], sorted(f["name"] for f in plan["profile"]["functions"]))
    assert any(p.message.startswith("planning pr_root") for p in progress)
    agent.plan_json, agent.plan = res.plan.plan_json, plan


def _round_inputs(worker: int = 0) -> list[tuple[int, int, int]]:
    """The (op, a, b) a worker of threads.c passes pr_root in one round (group.c's pr_input)."""
    out = []
    for i in range(512):
        x = ((worker * 7919 + i) * 2654435761) & 0xFFFFFFFF
        op, a, b = x % 23, (x >> 8) % 40, (x >> 12) % 5000 - 1000
        out.append(([99, 99, 13, 14, 15, 16][op - 17] if op >= 17 else op, a, b))
    return out


def _entries(fn: dict) -> float:
    return next(b["count"] for b in fn["blocks"] if b["offset"] == 0)


def test_a_window_in_which_the_root_never_ran_is_counted_longer_instead_of_planning_nothing(agent, threads_program):
    """A root whose calls are rare (or slow under uprobes on a loaded host) may not run in the asked window.
    The fixture here calls pr_root only when the test lets it (SIGUSR1), so the first window certainly sees
    no call: the agent says so, counts longer, and plans once the root ran."""
    fixture = Fixture(threads_program, "threads", "1", "gated")
    STARTED.append(fixture)
    try:
        target, main = _attach(agent, fixture, "attach-gated")
        root = next(f for f in _catalog(agent.session, main.digest).values() if f.name == "pr_root")
        _ask_plan(
            agent.session, "plan-gated", target=target.id, digest=main.digest, function_index=root.index, seconds=1
        )
        progress: list = []
        deadline = time.monotonic() + 60
        while not any("no call of pr_root in 1 s" in p.message for p in progress):
            assert time.monotonic() < deadline, [p.message for p in progress]
            progress += [m for _, m in _others(agent.session, "Progress") if m.command_id == "plan-gated"]
            time.sleep(0.05)
        fixture.proc.send_signal(signal.SIGUSR1)  # one round of calls, now
        res = _result(agent.session, "plan-gated", timeout=120)
        assert res.ok, res.error
        plan = json.loads(res.plan.plan_json)
        assert plan["status"] == "ok" and plan["root"] == "pr_root", plan.get("message")
        seconds = int(
            re.match(r"(\d+) s of exact block counts \(inline counters\)", plan["profile"]["source"]).group(1)
        )
        assert 2 <= seconds <= 8, plan["profile"]["source"]
        assert _plan_blocks(plan)[0] > 0, "the window ended once pr_root had run"
        progress += [m for _, m in _others(agent.session, "Progress") if m.command_id == "plan-gated"]
        fractions = [p.fraction for p in progress]
        assert fractions == sorted(fractions), [(p.fraction, p.message) for p in progress]
    finally:
        fixture.kill()


def _counting(agent, cid: str) -> list:
    """Progress of command cid until its inline counting window is a second in (its copies installed)."""
    progress: list = []
    deadline = time.monotonic() + HANG_S
    while not any(re.search(r"blocks exactly \(inline counters.*\): 1 of", p.message) for p in progress):
        assert time.monotonic() < deadline, [p.message for p in progress]
        progress += [m for _, m in _others(agent.session, "Progress") if m.command_id == cid]
        time.sleep(0.05)
    return progress


def test_a_cancel_in_the_middle_of_the_count_reverts_every_counted_copy(agent):
    pid = agent.fixture.pid
    text = _text(pid)
    _ask_plan(
        agent.session,
        "plan-cancel",
        target=agent.target.id,
        digest=agent.main.digest,
        function_index=agent.root.index,
        seconds=600,
    )
    _counting(agent, "plan-cancel")
    assert _journals(agent.state), "the counted copies are journaled like any install"
    assert _text(pid) != text, "pr_root's entry jumps to its counted copy"
    _send(agent.session, "plan-cancel-c", cancel=pb.CancelCommand(command_id="plan-cancel"))
    _result(agent.session, "plan-cancel-c")
    res = _result(agent.session, "plan-cancel", timeout=120)
    assert not res.ok and res.cancelled and "cancelled" in res.error, res
    assert _text(pid) == text and _journals(agent.state) == []
    _alive_and_checking(agent.fixture)


def test_a_process_that_exits_in_the_middle_of_the_count_is_a_clear_error_and_leaves_no_journal(agent, threads_program):
    fixture = Fixture(threads_program, "threads", "1")
    STARTED.append(fixture)
    try:
        target, main = _attach(agent, fixture, "attach-exits")
        root = next(f for f in _catalog(agent.session, main.digest).values() if f.name == "pr_root")
        _ask_plan(
            agent.session, "plan-exits", target=target.id, digest=main.digest, function_index=root.index, seconds=600
        )
        _counting(agent, "plan-exits")
        fixture.kill()
        res = _result(agent.session, "plan-exits", timeout=120)
        assert not res.ok and not res.cancelled
        assert f"process {fixture.pid} exited while its blocks were counted (inline counters)" in res.error, res.error
        assert _journals(agent.state) == []
    finally:
        fixture.kill()


def test_inline_counts_are_exact_a_gated_rounds_calls_of_a_leaf_root(agent, threads_program):
    """pr_table calls nothing: the plan counts it inline. The gated fixture's one worker calls pr_root
    only when let, one round of INPUTS (512) calls, so the window must stretch; the round is let go right after
    the agent says so, a second before the window's next end (the round takes milliseconds unprobed), and
    pr_table is then counted entered exactly as often as that round's inputs ask for it (op 15)."""
    fixture = Fixture(threads_program, "threads", "1", "gated")
    STARTED.append(fixture)
    try:
        target, main = _attach(agent, fixture, "attach-leaf")
        root = next(f for f in _catalog(agent.session, main.digest).values() if f.name == "pr_table")
        text = _text(fixture.pid)
        _ask_plan(
            agent.session, "plan-leaf", target=target.id, digest=main.digest, function_index=root.index, seconds=1
        )
        progress: list = []
        deadline = time.monotonic() + HANG_S
        while not any("no call of pr_table in 1 s" in p.message for p in progress):
            assert time.monotonic() < deadline, [p.message for p in progress]
            progress += [m for _, m in _others(agent.session, "Progress") if m.command_id == "plan-leaf"]
            time.sleep(0.02)
        fixture.proc.send_signal(signal.SIGUSR1)  # one round of calls, now
        res = _result(agent.session, "plan-leaf", timeout=120)
        assert res.ok, res.error
        plan = json.loads(res.plan.plan_json)
        source = plan["profile"]["source"]
        # (its .cold part, 3 bytes, takes no entry jump: uprobes count it, and the source says so)
        assert source.startswith(f"2 s of exact block counts (inline counters) in process {fixture.pid}"), source
        assert plan["profile"]["estimated"] is False
        [fn] = [f for f in plan["profile"]["functions"] if f["name"] == "pr_table"]
        want = sum(op == 15 for op, _, _ in _round_inputs())
        assert fn["name"] == "pr_table" and want > 0 and _entries(fn) == want, (want, fn)
        assert _text(fixture.pid) == text and _journals(agent.state) == []
    finally:
        fixture.kill()


def test_the_plan_listing_is_the_emitted_code_instruction_by_instruction(agent):
    code = agent.plan["code"]
    listing = code["listing"]
    joined = "".join(i["bytes"] for i in listing)
    assert code["hex"].startswith(joined), "the listing covers the code's instructions, in order"
    # After the instructions come only the copies' switch tables (each 8-aligned), which are not code.
    tail = (len(code["hex"]) - len(joined)) // 2
    tables = sum(g.get("jump_table_bytes", 0) for g in agent.plan["group"])
    assert tail == 0 or (tables > 0 and tail <= tables + 8 * len(agent.plan["group"])), (tail, tables)
    addrs = [int(i["address"], 16) for i in listing]
    assert addrs[0] == int(code["base"], 16) and addrs == sorted(addrs)
    origins = {i["from"] for i in listing}
    members = {g["function"] for g in agent.plan["group"]}
    assert all(o in ("added", "padding") or o.split("+0x")[0] in members for o in origins)
    assert sum(i["from"] == "added" for i in listing) == agent.plan["totals"]["added_jumps"]
    first = listing[0]
    assert first["from"] == "pr_root+0x0" and first["text"]
    # A call between members goes to the copy, and says so.
    assert any(re.search(r"^call .*<copy:pr_", i["text"]) for i in listing)


def test_the_daemons_plan_equals_hotpathd_plan_on_the_same_profile(agent, hotpathd):
    path = agent.tmp / "daemon-plan.json"
    path.write_text(agent.plan_json)
    out = subprocess.run(
        [
            str(hotpathd),
            "plan",
            "pid",
            str(agent.fixture.pid),
            "pr_root",
            "--profile",
            str(path),
            "--state-dir",
            str(agent.state),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    cli = json.loads(out.stdout)
    for key in (
        "status",
        "target",
        "options",
        "group",
        "totals",
        "kept_in_place",
        "indirect_calls",
        "icache_before",
        "icache_after",
        "code",
    ):
        assert cli[key] == agent.plan[key], key
    assert [f["blocks"] for f in cli["profile"]["functions"]] == [
        f["blocks"] for f in agent.plan["profile"]["functions"]
    ]


def _install(agent, cid: str, plan_json: str, approved: str, target: str | None = None) -> pb.CommandResult:
    _send(
        agent.session,
        cid,
        install_plan=pb.InstallPlan(
            plan_id="plan-1",
            plan_json=plan_json,
            approved_code_sha256=approved,
            target=target if target is not None else agent.target.id,
        ),
    )
    return _result(agent.session, cid, timeout=60)


def test_an_install_without_the_approved_hash_is_refused_and_changes_nothing(agent):
    pid, entry = agent.fixture.pid, int(agent.plan["group"][0]["address"], 16)
    agent.entry, agent.original = entry, _mem(pid, entry, 16)
    maps = _maps(pid)
    for cid, approved in (
        ("inst-nohash", ""),
        ("inst-wrong", "0" * 64),
        ("inst-short", agent.plan["code"]["sha256"][:32]),
    ):
        res = _install(agent, cid, agent.plan_json, approved)
        assert not res.ok and res.install.status == "refused", (cid, res.error)
        assert json.loads(res.install.detail_json)["status"] == "refused"
    res = _install(agent, "inst-wrong-2", agent.plan_json, "0" * 64)
    assert "not to the approved" in res.error and agent.plan["code"]["sha256"] in res.error
    # An altered plan: one byte of its code changed, the approval of the original.
    altered = dict(agent.plan)
    altered["code"] = dict(agent.plan["code"])
    h = altered["code"]["hex"]
    altered["code"]["hex"] = h[:20] + ("00" if h[20:22] != "00" else "01") + h[22:]
    res = _install(agent, "inst-altered", json.dumps(altered), agent.plan["code"]["sha256"])
    assert not res.ok and res.install.status == "refused", res.error
    assert _mem(pid, entry, 16) == agent.original and _maps(pid) == maps
    assert _journals(agent.state) == []
    _alive_and_checking(agent.fixture)


def test_the_approved_install_runs_the_copy_in_the_process_and_reverts_to_the_original_bytes(agent):
    pid = agent.fixture.pid
    res = _install(agent, "inst-ok", agent.plan_json, agent.plan["code"]["sha256"])
    assert res.ok, res.error
    assert res.install.status == "installed" and res.install.plan_id == "plan-1"
    detail = json.loads(res.install.detail_json)
    assert detail["status"] == "installed" and detail["id"] == "plan-1" and detail["pid"] == pid
    heap = int(detail["heap"], 16)
    assert detail["code_sha256"] == agent.plan["code"]["sha256"]
    # The copy is mapped (a memfd named by the plan's id) and the entry jumps to it.
    mapped = [line for line in _maps(pid).splitlines() if int(line.split("-")[0], 16) == heap]
    assert mapped and "r-xp" in mapped[0] and "plan-1" in mapped[0], _maps(pid)
    head = _mem(pid, agent.entry, 5)
    assert head[0] == 0xE9 and head != agent.original[:5]
    target = agent.entry + 5 + int.from_bytes(head[1:5], "little", signed=True)
    assert target == int(detail["new_entry"], 16)
    _alive_and_checking(agent.fixture, 1.0)
    # A measurement of the root while the copy is installed counts the calls where they run now: the
    # callers were patched to call the copy, so a probe on the original entry alone would count nothing.
    _send(
        agent.session,
        "m-copy",
        start_measurement=pb.StartMeasurement(
            measurement_id="m-copy",
            target=agent.target.id,
            metrics=["count"],
            resources=[
                pb.ResourceRef(
                    digest=agent.main.digest, function_index=agent.root.index, kind=pb.RESOURCE_KIND_FUNCTION
                )
            ],
        ),
    )
    started = _result(agent.session, "m-copy")
    assert started.ok, started.error
    time.sleep(1.5)
    _send(agent.session, "m-copy-stop", stop_measurement=pb.StopMeasurement(measurement_id="m-copy"))
    assert _result(agent.session, "m-copy-stop").ok
    batches = _measurement_batches(
        agent.session, "m-copy", HANG_S, until=lambda bs: any(b.state == pb.MEASUREMENT_STATE_STOPPED for b in bs)
    )
    assert _totals(batches).get(0, 0) > 1000, "the copy's calls are counted for the root's row"
    _alive_and_checking(agent.fixture)
    # The listing names it; a second install of the same plan is refused.
    _send(agent.session, "list-1", list_installed=pb.ListInstalled())
    lst = _result(agent.session, "list-1")
    assert lst.ok and lst.install.status == "listed"
    [ins] = [i for i in json.loads(lst.install.detail_json)["installed"] if i["id"] == "plan-1"]
    assert ins["state"] == "installed" and ins["pid"] == pid and ins["heap"] == detail["heap"]
    again = _install(agent, "inst-again", agent.plan_json, agent.plan["code"]["sha256"])
    assert not again.ok and "installed" in again.error
    # Revert: the original bytes are back and the copy is gone.
    _send(agent.session, "revert-1", revert_plan=pb.RevertPlan(plan_id="plan-1", target=agent.target.id))
    rev = _result(agent.session, "revert-1")
    assert rev.ok, rev.error
    assert rev.install.status in ("reverted", "reverted_heap_kept")
    assert _mem(pid, agent.entry, 16) == agent.original
    if rev.install.status == "reverted":
        assert not any(int(line.split("-")[0], 16) == heap for line in _maps(pid).splitlines())
    assert _journals(agent.state) == []
    _alive_and_checking(agent.fixture)
    _send(agent.session, "revert-2", revert_plan=pb.RevertPlan(plan_id="plan-1", target=agent.target.id))
    rev2 = _result(agent.session, "revert-2")
    assert not rev2.ok and rev2.install.status == "nothing_installed"


def _installed_entry(agent, plan_id: str) -> dict | None:
    _send(agent.session, f"list-{plan_id}", list_installed=pb.ListInstalled())
    lst = _result(agent.session, f"list-{plan_id}")
    assert lst.ok, lst.error
    return next((i for i in json.loads(lst.install.detail_json)["installed"] if i["id"] == plan_id), None)


def test_compare_plan_alternates_reverted_and_installed_windows_and_leaves_the_plan_installed(agent):
    """ComparePlan of the installed plan: pairs of windows with the plan reverted and installed again, in
    alternating order, while the fixture checks every result; Progress after every window; CompareResult
    carries the JSON `hotpathd compare --json` prints; the plan is installed at the end. A cancel stops it
    between windows, the plan installed again before the answer; a plan not installed, and the kernel, are
    refused with their reasons."""
    pid = agent.fixture.pid
    res = _install(agent, "inst-cmp", agent.plan_json, agent.plan["code"]["sha256"])
    assert res.ok, res.error
    _send(
        agent.session,
        "cmp-1",
        compare_plan=pb.ComparePlan(plan_id="plan-1", target=agent.target.id, pairs=2, window_seconds=0.5),
    )
    cmp = _result(agent.session, "cmp-1")
    assert cmp.ok, cmp.error
    assert cmp.compare.plan_id == "plan-1"
    detail = json.loads(cmp.compare.detail_json)
    assert detail["id"] == "plan-1" and detail["pid"] == pid and detail["root"] == "pr_root"
    assert detail["pairs"] == 2 and detail["state"] == "installed"
    arms = [(w["pair"], w["arm"]) for w in detail["windows"]]
    assert arms == [(0, "original"), (0, "installed"), (1, "installed"), (1, "original")]
    assert all(w["samples"] > 0 and 0 <= w["samples_in_plan"] <= w["samples"] for w in detail["windows"])
    assert detail["summary"]["verdict"] in ("faster", "slower", "within_noise", "insufficient")
    progress = [m.message for _, m in _others(agent.session, "Progress") if m.command_id == "cmp-1"]
    windows = [m for m in progress if m.startswith("pair ")]
    assert len(windows) == 4 and windows[0].startswith("pair 1/2: original, "), progress
    assert all("of samples in the plan's code" in m for m in windows), windows
    # Installed again as it was: the entry jumps to the copy the journal names.
    ins = _installed_entry(agent, "plan-1")
    assert ins and ins["state"] == "installed"
    head = _mem(pid, agent.entry, 5)
    assert head[0] == 0xE9
    assert agent.entry + 5 + int.from_bytes(head[1:5], "little", signed=True) == int(ins["new_entry"], 16)
    _alive_and_checking(agent.fixture)
    # A cancel: the answer says cancelled, and the plan is installed.
    _send(
        agent.session,
        "cmp-2",
        compare_plan=pb.ComparePlan(plan_id="plan-1", target=agent.target.id, pairs=10, window_seconds=0.5),
    )
    _send(agent.session, "cmp-2-cancel", cancel=pb.CancelCommand(command_id="cmp-2"))
    _result(agent.session, "cmp-2-cancel")
    cancelled = _result(agent.session, "cmp-2")
    assert not cancelled.ok and cancelled.cancelled, cancelled
    ins = _installed_entry(agent, "plan-1")
    assert ins and ins["state"] == "installed"
    assert _mem(pid, agent.entry, 1)[0] == 0xE9
    # Refused: a plan not installed, the kernel.
    _send(agent.session, "cmp-none", compare_plan=pb.ComparePlan(plan_id="no-such-plan", target=agent.target.id))
    none = _result(agent.session, "cmp-none")
    assert not none.ok and "not installed" in none.error
    _send(agent.session, "cmp-kernel", compare_plan=pb.ComparePlan(plan_id="plan-1", target="kernel"))
    kernel = _result(agent.session, "cmp-kernel")
    assert not kernel.ok and "kernel installs are not compared here" in kernel.error
    _alive_and_checking(agent.fixture)
    _send(agent.session, "revert-cmp", revert_plan=pb.RevertPlan(plan_id="plan-1", target=agent.target.id))
    rev = _result(agent.session, "revert-cmp")
    assert rev.ok, rev.error
    assert _mem(pid, agent.entry, 16) == agent.original


def test_a_hot_set_plan_samples_the_process_and_its_install_splices_every_members_entry(agent):
    """MakePlan with hot_set: the process's PCs sampled (no root), the module the digest names planned
    whole, the answer a plan `hotpathd install` takes; InstallPlan splices every member's entry (its
    answer counts them) and RevertPlan puts every entry back."""
    pid = agent.fixture.pid
    _ask_plan(
        agent.session, "plan-hs", target=agent.target.id, digest=agent.main.digest, seconds=PLAN_SECONDS, hot_set=True
    )
    res = _result(agent.session, "plan-hs", timeout=120)
    assert res.ok, res.error
    plan = json.loads(res.plan.plan_json)
    assert plan["status"] == "ok" and plan["options"]["hot_set"] is True
    source = plan["profile"]["source"]
    assert re.match(
        rf"{PLAN_SECONDS} s of exact block counts \(inline counters\) in process {pid}, of the \d+ members", source
    )
    # The members that call others keep their samples, scaled to the counted ones: then the profile is an estimate.
    assert plan["profile"]["estimated"] is ("PC samples (scaled, an estimate) for " in source), source
    assert plan["target"]["module"] == agent.main.name and res.plan.build_id == agent.main.build_id
    group = [g["function"] for g in plan["group"]]
    assert plan["root"] == group[0] and len(group) > 1 and "pr_root" in group
    assert res.plan.code_sha256 == plan["code"]["sha256"]
    progress = [m.message for _, m in _others(agent.session, "Progress") if m.command_id == "plan-hs"]
    assert any(f"sampling process {pid}'s PCs" in m for m in progress), progress
    assert any(re.search(r"counting \d+ functions' blocks exactly \(inline counters\)", m) for m in progress), progress
    assert _journals(agent.state) == [], "the counted copies are reverted before the plan is answered"
    assert any("hot set" in m for m in progress), progress
    entries = {g["function"]: int(g["address"], 16) for g in plan["group"]}
    kept = {k["function"] for k in plan.get("kept_in_place", [])}
    originals = {f: _mem(pid, a, 5) for f, a in entries.items()}
    _send(
        agent.session,
        "inst-hs",
        install_plan=pb.InstallPlan(
            plan_id="plan-hs",
            plan_json=res.plan.plan_json,
            approved_code_sha256=res.plan.code_sha256,
            target=agent.target.id,
        ),
    )
    ins = _result(agent.session, "inst-hs", timeout=60)
    assert ins.ok, ins.error
    detail = json.loads(ins.install.detail_json)
    assert detail["status"] == "installed" and detail["entries"] == len(group), detail
    for f, a in entries.items():
        if f not in kept:
            assert _mem(pid, a, 1)[0] == 0xE9, f"{f}'s entry jumps to its copy"
    _alive_and_checking(agent.fixture, 1.0)
    _send(agent.session, "revert-hs", revert_plan=pb.RevertPlan(plan_id="plan-hs", target=agent.target.id))
    rev = _result(agent.session, "revert-hs", timeout=60)
    assert rev.ok and rev.install.status in ("reverted", "reverted_heap_kept"), rev.error
    assert {f: _mem(pid, a, 5) for f, a in entries.items()} == originals
    assert _journals(agent.state) == []
    _alive_and_checking(agent.fixture)


def test_hot_set_requests_the_agent_cannot_serve_are_refused_with_the_reason(agent):
    for cid, mp in (
        ("hs-kernel", pb.MakePlan(plan_id="hs-k", target="kernel", seconds=1, hot_set=True)),
        (
            "hs-measured",
            pb.MakePlan(plan_id="hs-m", target=agent.target.id, seconds=1, hot_set=True, measurement_id="m-copy"),
        ),
        ("hs-nodigest", pb.MakePlan(plan_id="hs-d", target=agent.target.id, digest="ab" * 32, seconds=1, hot_set=True)),
    ):
        _send(agent.session, cid, make_plan=mp)
        res = _result(agent.session, cid)
        assert not res.ok, cid
        assert {"hs-kernel": "kernel", "hs-measured": "measurement_id", "hs-nodigest": "no module"}[cid] in res.error


def test_an_agent_killed_in_the_middle_of_an_install_leaves_nothing_half_done(agent, hotpathd, standin, monkeypatch):
    pid = agent.fixture.pid
    _stop_agent(agent)
    # This run of the agent kills itself (SIGKILL) right after it spliced the entry, before the call sites.
    monkeypatch.setenv("HOTPATH_TEST_KILL_AT", "entry")
    dying = _start_agent(hotpathd, standin, agent.state, agent.tmp / "agent.log")
    monkeypatch.delenv("HOTPATH_TEST_KILL_AT")
    agent.session = dying.session
    _send(
        dying.session,
        "inst-die",
        install_plan=pb.InstallPlan(
            plan_id="plan-1",
            plan_json=agent.plan_json,
            approved_code_sha256=agent.plan["code"]["sha256"],
            target=agent.target.id,
        ),
    )
    assert dying.proc.wait(timeout=60) == -signal.SIGKILL
    assert _journals(agent.state) == ["plan-1.journal"], "the journal records the half-done install"
    assert _mem(pid, agent.entry, 1) == b"\xe9", "the entry was spliced before the agent died"
    _alive_and_checking(agent.fixture, 1.0)
    # The restarted agent reverts it from the journal before it takes commands.
    restarted = _start_agent(hotpathd, standin, agent.state, agent.tmp / "agent.log")
    agent.proc, agent.session, agent.hello = restarted.proc, restarted.session, restarted.hello
    assert _mem(pid, agent.entry, 16) == agent.original
    assert _journals(agent.state) == []
    assert "reverted from its journal" in restarted.log()
    _send(agent.session, "list-2", list_installed=pb.ListInstalled())
    lst = _result(agent.session, "list-2")
    assert lst.ok and json.loads(lst.install.detail_json)["installed"] == []
    _alive_and_checking(agent.fixture)
    fixture_target = {t.id: t for t in agent.hello.targets}[agent.target.id]
    assert fixture_target.state == pb.TARGET_STATE_ATTACHED


def _same_result(a: pb.CommandResult, b: pb.CommandResult) -> None:
    assert (a.command_id, a.ok, a.error, a.install.plan_id, a.install.status, a.install.detail_json) == (
        b.command_id,
        b.ok,
        b.error,
        b.install.plan_id,
        b.install.status,
        b.install.detail_json,
    )


def test_a_restarted_agent_reports_its_installs_in_hello_and_a_replayed_install_runs_once(agent, hotpathd, standin):
    """Install, kill -9 the agent, restart it: Hello lists the install from the journal (plan id, state, pid,
    start time, root, code hash, heap). Replaying the InstallPlan (the same command id, as a backend that
    lost the answer sends it again) gets the first answer back and installs nothing, in the same run and
    after the restart; a new command with an altered plan, or with a hash that is not the plan's, is refused
    and writes nothing."""
    pid, sha = agent.fixture.pid, agent.plan["code"]["sha256"]
    first = _install(agent, "inst-hello", agent.plan_json, sha)
    assert first.ok, first.error
    detail = json.loads(first.install.detail_json)
    maps, head, journal = _maps(pid), _mem(pid, agent.entry, 16), (agent.state / "replace" / "plan-1.journal")
    journal_bytes = journal.read_bytes()

    def nothing_written():
        assert _maps(pid) == maps and _mem(pid, agent.entry, 16) == head
        assert _journals(agent.state) == ["plan-1.journal"] and journal.read_bytes() == journal_bytes

    # Replayed in the same run: the remembered answer, nothing installed again.
    _send(
        agent.session,
        "inst-hello",
        install_plan=pb.InstallPlan(
            plan_id="plan-1", plan_json=agent.plan_json, approved_code_sha256=sha, target=agent.target.id
        ),
    )
    _same_result(_result(agent.session, "inst-hello", timeout=60), first)
    nothing_written()
    # kill -9 the agent; the copy keeps running in the process.
    agent.proc.kill()
    assert agent.proc.wait(timeout=15) == -signal.SIGKILL
    _alive_and_checking(agent.fixture, 1.0)
    restarted = _start_agent(hotpathd, standin, agent.state, agent.tmp / "agent.log")
    agent.proc, agent.session, agent.hello = restarted.proc, restarted.session, restarted.hello
    assert agent.hello.installs_listed
    [ins] = agent.hello.installs
    assert (ins.plan_id, ins.state, ins.pid, ins.root, ins.code_sha256) == ("plan-1", "installed", pid, "pr_root", sha)
    assert ins.heap == int(detail["heap"], 16) and ins.heap_len > 0
    assert ins.start_time == int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    # The restarted agent reads the process's code under the install as its binary has it: same catalogs.
    again = {t.id: t for t in agent.hello.targets}[agent.target.id]
    assert agent.main.digest in [m.digest for m in again.modules]
    nothing_written()
    # Replayed after the restart: the answer kept in the state folder, nothing installed again.
    _send(
        agent.session,
        "inst-hello",
        install_plan=pb.InstallPlan(
            plan_id="plan-1", plan_json=agent.plan_json, approved_code_sha256=sha, target=agent.target.id
        ),
    )
    _same_result(_result(agent.session, "inst-hello", timeout=60), first)
    assert "kept result is sent again" in restarted.log()
    nothing_written()
    # New commands: an altered plan with the original's approval, and the plan with a hash not its own.
    altered = dict(agent.plan)
    altered["code"] = dict(agent.plan["code"])
    h = altered["code"]["hex"]
    altered["code"]["hex"] = h[:40] + ("00" if h[40:42] != "00" else "01") + h[42:]
    for cid, plan_json, approved in (
        ("inst-replay-altered", json.dumps(altered), sha),
        ("inst-replay-other-hash", agent.plan_json, "1" * 64),
    ):
        res = _install(agent, cid, plan_json, approved)
        assert not res.ok and res.install.status == "refused", (cid, res.error)
        nothing_written()
    _alive_and_checking(agent.fixture)
    _send(agent.session, "revert-hello", revert_plan=pb.RevertPlan(plan_id="plan-1", target=agent.target.id))
    rev = _result(agent.session, "revert-hello", timeout=60)
    assert rev.ok, rev.error
    assert _mem(pid, agent.entry, 16) == agent.original and _journals(agent.state) == []
    _alive_and_checking(agent.fixture)


def _plan_blocks(plan: dict) -> dict[int, float]:
    [root] = [f for f in plan["profile"]["functions"] if f["name"] == "pr_root"]
    return {b["offset"]: b["count"] for b in root["blocks"]}


def test_a_plan_from_a_measurement_of_this_agent_uses_its_counts_running_and_ended(agent):
    sess = agent.session
    _send(
        sess,
        "start-m",
        start_measurement=pb.StartMeasurement(
            measurement_id="m-plan",
            target=agent.target.id,
            metrics=["count"],
            resources=[
                pb.ResourceRef(
                    digest=agent.main.digest,
                    function_index=agent.root.index,
                    kind=pb.RESOURCE_KIND_FUNCTION,
                    blocks=True,
                )
            ],
        ),
    )
    assert _result(sess, "start-m").ok
    time.sleep(1.5)
    _ask_plan(
        sess,
        "plan-m",
        target=agent.target.id,
        digest=agent.main.digest,
        function_index=agent.root.index,
        measurement_id="m-plan",
    )
    res = _result(sess, "plan-m", timeout=60)
    assert res.ok, res.error
    plan = json.loads(res.plan.plan_json)
    assert plan["status"] == "ok" and plan["profile"]["source"] == "measurement m-plan (exact counts)"
    assert not any("counting" in m.message for _, m in _others(sess, "Progress")), "nothing measured anew"
    running = _plan_blocks(plan)
    assert running and max(running.values()) > 1000
    # Ended: the counts it had when it stopped still make a plan.
    _send(sess, "stop-m", stop_measurement=pb.StopMeasurement(measurement_id="m-plan"))
    assert _result(sess, "stop-m").ok
    _ask_plan(
        sess,
        "plan-m2",
        target=agent.target.id,
        digest=agent.main.digest,
        function_index=agent.root.index,
        measurement_id="m-plan",
        drain=False,
    )
    res = _result(sess, "plan-m2", timeout=60)
    assert res.ok, res.error
    ended = _plan_blocks(json.loads(res.plan.plan_json))
    assert set(ended) == set(running) and all(ended[o] >= running[o] for o in running)
    _ask_plan(
        sess,
        "plan-nom",
        target=agent.target.id,
        digest=agent.main.digest,
        function_index=agent.root.index,
        measurement_id="m-none",
        drain=False,
    )
    assert "no measurement m-none" in _result(sess, "plan-nom").error


def _file_bytes(pid: int, addr: int, n: int) -> bytes:
    """The program's own bytes at addr: the mapped file's bytes at that offset."""
    for line in _maps(pid).splitlines():
        rng, perms, off = line.split()[:3]
        lo, hi = (int(x, 16) for x in rng.split("-"))
        if lo <= addr < hi and "x" in perms:
            with open(f"/proc/{pid}/map_files/{rng}", "rb") as f:
                f.seek(addr - lo + int(off, 16))
                return f.read(n)
    raise AssertionError(f"0x{addr:x} is in no executable mapping of {pid}")


def _counts_after(sess, mid: str, since_ns: int, want: float) -> float:
    """The measurement's counts (all its rows) in intervals that began after since_ns, waiting (HANG_S at most)
    until they exceed want."""
    batches = _measurement_batches(
        sess,
        mid,
        HANG_S,
        until=lambda bs: sum(_totals([b for b in bs if b.interval_start_unix_ns >= since_ns]).values()) > want,
    )
    return sum(_totals([b for b in batches if b.interval_start_unix_ns >= since_ns]).values())


def test_plan_install_and_revert_while_the_root_is_measured_keep_the_program_and_the_counts_right(agent, hotpathd):
    """docs/plans.md's order with a measurement of the root's blocks attached all along (issue 15): its
    uprobes put int3 into the process's text, yet the disassembly (daemon and CLI) shows the program's own
    instructions with the probes marked, the plan is made from them, the install's check of the bytes
    passes, the probes follow the calls into the copy and back to the original on revert (the counts go
    on), and once the measurement stops no int3 is left behind."""
    sess, pid, entry, size = agent.session, agent.fixture.pid, agent.entry, agent.root.size
    own = _file_bytes(pid, entry, size)
    assert _mem(pid, entry, size) == own, "no probe in pr_root before the measurement"
    _send(
        sess,
        "m-along",
        start_measurement=pb.StartMeasurement(
            measurement_id="m-along",
            target=agent.target.id,
            metrics=["count"],
            resources=[
                pb.ResourceRef(
                    digest=agent.main.digest,
                    function_index=agent.root.index,
                    kind=pb.RESOURCE_KIND_FUNCTION,
                    blocks=True,
                )
            ],
        ),
    )
    started = _result(sess, "m-along")
    assert started.ok, started.error
    # The probes are real: the kernel wrote int3 into the process's text at the root's block starts.
    probed = _mem(pid, entry, size)
    sites = sorted(i for i in range(size) if probed[i] == 0xCC and own[i] != 0xCC)
    assert 0 in sites and set(sites) <= {b.offset for b in agent.root.blocks}, sites
    # The disassembly is the program's own code: the daemon's answer to InspectFunction ...
    _send(
        sess,
        "insp-along",
        inspect_function=pb.InspectFunction(
            digest=agent.main.digest, function_index=agent.root.index, target=agent.target.id
        ),
    )
    dis = _result(sess, "insp-along")
    assert dis.ok, dis.error
    assert b"".join(i.bytes for i in dis.disassembly.instructions) == own
    assert not any(i.text.startswith("int3") for i in dis.disassembly.instructions)
    # ... and `hotpathd inspect`, which marks where the probes sit.
    out = subprocess.run(
        [str(hotpathd), "inspect", "pid", str(pid), "pr_root", "--json"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    cli = json.loads(out.stdout)
    insns = sorted((i for b in cli["blocks"] for i in b["instructions"]), key=lambda i: i["address"])
    assert bytes.fromhex("".join(i["bytes"] for i in insns)) == own
    assert sorted(a - entry for a in cli["probes"]) == sites
    assert sorted(i["address"] - entry for i in insns if i["probe"]) == sites
    time.sleep(1.0)
    # Plan from the measurement, install it: the bytes the install checks are the program's own.
    _ask_plan(
        sess,
        "plan-along",
        plan_id="plan-p",
        target=agent.target.id,
        digest=agent.main.digest,
        function_index=agent.root.index,
        measurement_id="m-along",
        drain=False,
    )
    res = _result(sess, "plan-along", timeout=120)
    assert res.ok, res.error
    plan = json.loads(res.plan.plan_json)
    _send(
        sess,
        "inst-along",
        install_plan=pb.InstallPlan(
            plan_id="plan-p",
            plan_json=res.plan.plan_json,
            approved_code_sha256=plan["code"]["sha256"],
            target=agent.target.id,
        ),
    )
    inst = _result(sess, "inst-along", timeout=60)
    assert inst.ok, inst.error
    installed_ns = time.time_ns()
    assert _mem(pid, entry, 1) == b"\xe9", "the entry jumps to the copy"
    # The calls run in the copy now, and the probes went with them. Without them the root's rows would
    # count only what threads already inside the original ran (a few hits): 1000 needs the copy's probes.
    assert _counts_after(sess, "m-along", installed_ns, 1000) > 1000
    _alive_and_checking(agent.fixture)
    _send(sess, "rev-along", revert_plan=pb.RevertPlan(plan_id="plan-p", target=agent.target.id))
    rev = _result(sess, "rev-along", timeout=60)
    assert rev.ok, rev.error
    reverted_ns = time.time_ns()
    # Back in the original: its probes are armed again (an int3 at the entry) and count on.
    assert _mem(pid, entry, 1) == b"\xcc"
    assert _counts_after(sess, "m-along", reverted_ns, 1000) > 1000
    _alive_and_checking(agent.fixture)
    _send(sess, "m-along-stop", stop_measurement=pb.StopMeasurement(measurement_id="m-along"))
    assert _result(sess, "m-along-stop").ok
    # No probe is left behind: the program's own bytes, and the disassembly shows no probe.
    assert _mem(pid, entry, size) == own
    out = subprocess.run(
        [str(hotpathd), "inspect", "pid", str(pid), "pr_root", "--json"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and json.loads(out.stdout)["probes"] == [], out.stderr
    assert _journals(agent.state) == []
    _alive_and_checking(agent.fixture)


def test_a_kernel_plan_samples_pcs_and_is_labelled_an_estimate(agent):
    vmlinux = agent.hello.modules[0]
    functions = {f.name: f for f in _catalog(agent.session, vmlinux.digest).values()}
    reader = subprocess.Popen(
        ["dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=200000000"], stderr=subprocess.DEVNULL
    )
    try:
        _ask_plan(
            agent.session,
            "plan-k",
            target="kernel",
            digest=vmlinux.digest,
            function_index=functions["vfs_read"].index,
            seconds=2,
            drain=False,
        )
        res = _result(agent.session, "plan-k", timeout=120)
    finally:
        reader.kill()
        reader.wait()
    plan = json.loads(res.plan.plan_json)
    assert plan["root"] == "vfs_read" and plan["target"]["kind"] == "kernel"
    assert plan["profile"]["estimated"] is True and "PC samples" in plan["profile"]["source"]
    assert res.ok, res.error
    assert plan["code"]["verified"] and res.plan.code_sha256 == plan["code"]["sha256"]


def test_the_fixture_verified_every_call_it_made(agent):
    agent.fixture.proc.send_signal(signal.SIGTERM)
    out = agent.fixture.finish()
    assert agent.fixture.proc.returncode == 0, out
    assert int(re.search(r"verified (\d+) calls", out).group(1)) > 1000


def test_a_dead_target_and_the_kernel_are_refused_with_their_reasons(agent, threads_program):
    fixture = Fixture(threads_program, "threads", "1")
    STARTED.append(fixture)
    target, main = _attach(agent, fixture, "attach-dead")
    fixture.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if any(
            t.id == target.id and t.state == pb.TARGET_STATE_EXITED
            for _, u in _others(agent.session, "TargetsUpdate")
            for t in u.targets
        ):
            break
        time.sleep(0.2)
    _ask_plan(
        agent.session,
        "plan-dead",
        target=target.id,
        digest=main.digest,
        function_index=agent.root.index,
        seconds=1,
        drain=False,
    )
    res = _result(agent.session, "plan-dead")
    assert not res.ok and ("ended" in res.error or "exited" in res.error), res.error
    res = _install(agent, "inst-dead", agent.plan_json, agent.plan["code"]["sha256"], target=target.id)
    assert not res.ok and res.install.status == "refused" and res.error, res.error
    # The kernel: refused with what the agent probed (this VM's kernel loads no modules).
    cap = next(c for c in agent.hello.capabilities if c.name == "kernel_code_replacement")
    res = _install(agent, "inst-kernel", agent.plan_json, agent.plan["code"]["sha256"], target="kernel")
    assert not res.ok and res.install.status == "refused"
    if not cap.available:
        assert cap.detail and cap.detail in res.error, (cap.detail, res.error)
    # Bad input: an id that cannot name a journal, a function index out of range.
    _ask_plan(
        agent.session,
        "plan-badid",
        plan_id="../x",
        target="kernel",
        digest=agent.hello.modules[0].digest,
        function_index=0,
        drain=False,
    )
    assert "plan id" in _result(agent.session, "plan-badid").error
    vmlinux = agent.hello.modules[0]
    _ask_plan(
        agent.session,
        "plan-range",
        plan_id="p-range",
        target="kernel",
        digest=vmlinux.digest,
        function_index=10**8,
        drain=False,
    )
    assert "out of range" in _result(agent.session, "plan-range").error
