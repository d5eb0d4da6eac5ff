# SPDX-License-Identifier: Apache-2.0
"""A block measurement of a busy function, across its arming, yields intervals the backend accepts.

The real hotpathd measures pr_root (agent/tests/fixtures/group.c) with its blocks while three threads
of the threads fixture call it in a loop; the scripted backend stand-in of test_stream.py receives the
intervals, and each one is checked by the backend's own checker (app.protocol.measured_edges.check_edges),
which refuses an interval whose edges do not conserve flow at a measured block. Probes attached one
by one used to count while their neighbours were not attached yet, so the first interval's block
counts came from different sets of executions, and counters read one row after another while the
threads ran cut each row at a different moment; its edges did not add up (issue 15: the backend
refused it and, before it refused intervals alone, the host stayed offline). More busy threads than
cores make both show at once; the measurement is armed several times."""

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
    compile_threads,
)
from test_stream import standin_servers

from app.protocol.agent_input import InvalidInput
from app.protocol.measured_edges import FunctionShape, check_edges, shape_edges

ARMINGS = 4
THREADS = 8  # more busy threads than cores: the agent reads its counters while they run
STARTED: list[Fixture] = []


@pytest.fixture(scope="module")
def threads_program(tmp_path_factory):
    return compile_threads(tmp_path_factory.mktemp("flow-programs"))


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    yield from standin_servers(tmp_path_factory.mktemp("flow-standin"))


@pytest.fixture(scope="module")
def agent(hotpathd, standin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flow-stream")
    run = _start_agent(hotpathd, standin, tmp / "state", tmp / "agent.log")
    yield run
    if run.proc.poll() is None:
        run.proc.kill()
        run.proc.wait()
    for fx in STARTED:
        fx.kill()


def test_a_busy_functions_block_intervals_conserve_flow_from_the_first_one(agent, threads_program):
    fixture = Fixture(threads_program, "threads", str(THREADS))
    STARTED.append(fixture)
    _send(agent.session, "attach-flow", attach_target=pb.AttachTarget(pid=fixture.pid))
    res = _result(agent.session, "attach-flow")
    assert res.ok, res.error
    [target] = res.targets.targets
    main = next(m for m in target.modules if m.name.endswith("/threads"))
    _others(agent.session, "TargetsUpdate")
    pr_root = next(f for f in _catalog(agent.session, main.digest).values() if f.name == "pr_root")
    blocks = [
        [b.offset, b.size, b.instruction_count, [[s.kind, s.target, s.target_name] for s in b.successors]]
        for b in pr_root.blocks
    ]
    checked = 0
    for k in range(ARMINGS):
        mid = f"m-flow-{k}"
        _send(
            agent.session,
            f"start-{mid}",
            start_measurement=pb.StartMeasurement(
                measurement_id=mid,
                target=target.id,
                metrics=["count"],
                resources=[
                    pb.ResourceRef(
                        digest=main.digest, function_index=pr_root.index, kind=pb.RESOURCE_KIND_FUNCTION, blocks=True
                    )
                ],
            ),
        )
        res = _result(agent.session, f"start-{mid}")
        assert res.ok, res.error
        rows = list(res.measurement.resources)
        assert rows[0].function == "pr_root" and rows[0].kind == pb.RESOURCE_KIND_FUNCTION
        shape = FunctionShape(
            row=0,
            edges=shape_edges(blocks),
            basis="exact",
            block_rows={r.block_offset: i for i, r in enumerate(rows) if r.kind == pb.RESOURCE_KIND_BLOCK},
        )
        assert len(shape.block_rows) == len(pr_root.blocks), "every block of pr_root is probed"
        batches = _measurement_batches(agent.session, mid, HANG_S, until=lambda bs: sum(bool(b.edges) for b in bs) >= 3)
        _send(agent.session, f"stop-{mid}", stop_measurement=pb.StopMeasurement(measurement_id=mid))
        assert _result(agent.session, f"stop-{mid}").ok
        assert sum(bool(b.edges) for b in batches) >= 3, f"{len(batches)} intervals of {mid}"
        for i, b in enumerate(batches):
            # The backend's margin (IN_FLIGHT 16 + 1% of a block's count) covers the executions in
            # flight at an interval's two cuts: at most one per thread at each, 2 x THREADS = 16; the
            # counts are cut at one moment, so nothing else (how long the agent takes to read its
            # counters, how loaded the machine is) adds to a block's difference.
            try:
                check_edges(b, {0: shape})
            except InvalidInput as exc:
                pytest.fail(f"interval {i} of {mid} would be refused by the backend: {exc}")
            checked += 1
        # The threads were busy from before the arming: the first interval already counted calls.
        first = {rv.resource: rv.values[0].total for rv in batches[0].resources}
        assert first.get(0, 0) > 0 and batches[0].edges, first
        time.sleep(0.1)
    assert checked >= 3 * ARMINGS
