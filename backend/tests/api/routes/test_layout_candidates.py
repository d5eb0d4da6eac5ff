# SPDX-License-Identifier: Apache-2.0
"""Layout candidates (GET /hosts/{host}/targets/{target}/layout-candidates) over data a scripted agent
sent: the kernel's functions ranked by sampled share × hot lines × jumps per 64 B (× the taken share
where an exact block-count measurement exists), each figure checked against values computed by hand
from the catalog below; a process's measured functions ranked by their share of the executed
instructions, a function a plan kept in place marked and ranked last; malformed queries 422; sign-in
required."""

import time
from datetime import UTC, datetime, timedelta

import pytest

from app.protocol.proto import pb
from tests.grpc.test_commands import _until_state
from tests.grpc.test_plans import TARGET, _host_with_process, _until
from tests.scripted_agent import KERNEL_BASE, PROCESS_BASE, wait_catalog_complete, wait_for_ack, wait_until

FT, TK, TC, RET = (
    pb.SUCCESSOR_KIND_FALLTHROUGH,
    pb.SUCCESSOR_KIND_TAKEN,
    pb.SUCCESSOR_KIND_TAIL_CALL,
    pb.SUCCESSOR_KIND_RETURN,
)
E = pb.EdgeCount
EXACT = pb.EDGE_LABEL_EXACT_DERIVED


def _edge(row, kind, count, frm=None, to=None):
    """An exact-derived edge of a function row (from and to: block offsets, where the kind has them)."""
    return E(function_row=row, kind=kind, from_offset=frm or 0, to_offset=to or 0, count=count, label=EXACT)


async def _measure_blocks(client, host_id, target, refs):
    """Start a count measurement of functions with their blocks; its id once the agent armed it."""
    resources = [{"digest": d, "function_index": i, "blocks": True} for d, i in refs]
    r = await client.post(
        f"/api/v1/hosts/{host_id}/measurements", json={"target": target, "resources": resources, "metrics": ["count"]}
    )
    assert r.status_code == 202, r.text
    assert (await _until_state(client, host_id, r.json()["id"], "done", "failed"))["state"] == "done"
    return r.json()["params"]["measurement_id"]


def _fn(index, name, offset, blocks, undecodable=False):
    """blocks: (offset, size, instructions, [(kind, target)])."""
    return pb.Function(
        index=index,
        name=name,
        offset=offset,
        size=sum(b[1] for b in blocks),
        undecodable=undecodable,
        undecodable_offset=0x20 if undecodable else 0,
        blocks=[
            pb.Block(
                offset=o, size=s, instruction_count=n, successors=[pb.Successor(kind=k, target=t) for k, t in succ]
            )
            for o, s, n, succ in blocks
        ],
    )


# KERNEL_BASE + 0x1000 is 64-byte aligned, so each function's lines are those of its offsets.
ALPHA = _fn(
    0,
    "alpha",
    0x1000,
    [
        (0x00, 0x30, 5, [(FT, 0x30), (TK, 0x70)]),  # a conditional jump
        (0x30, 0x40, 6, [(FT, 0x70)]),  # no jump
        (0x70, 0x10, 1, [(TK, 0x00)]),  # an unconditional jump back
        (0x80, 0x80, 9, [(RET, 0)]),
    ],
)
BETA = _fn(
    1,
    "beta",
    0x1100,
    [
        (0x00, 0x10, 2, [(FT, 0x10), (TK, 0x40)]),
        (0x10, 0x30, 4, [(FT, 0x40)]),
        (0x40, 0x40, 3, [(TC, 0)]),  # a tail call: a jump out of the function
    ],
)
GAMMA = _fn(2, "gamma", 0x1200, [(0x00, 0x40, 8, [(RET, 0)])])  # straight-line code
DELTA = _fn(3, "delta", 0x1300, [(0x00, 0x40, 8, [(FT, 0x40)]), (0x40, 0x40, 8, [(RET, 0)])], undecodable=True)
T0 = (datetime.now(UTC) - timedelta(hours=2)).replace(second=0, microsecond=0)
RANGE = {"from": T0.isoformat(), "to": (T0 + timedelta(seconds=10)).isoformat()}


def ns(t: datetime) -> int:
    return int(t.timestamp()) * 1_000_000_000


@pytest.fixture
async def kernel_host(backend, client, unique):
    host_id = f"lay-{unique}"
    agent = await backend.agent(
        host_id, kernel_tag=f"lay-{unique}", modules=[("vmlinux", KERNEL_BASE, [ALPHA, BETA, GAMMA, DELTA])]
    )
    await agent.connect()
    await wait_catalog_complete(client, host_id)
    # One interval: alpha 30 + 10 + 20 samples in its first three blocks, beta 10 + 10 in its first and
    # last, gamma 40, delta 5; 50 user samples. All samples: 175.
    seq = await agent.send_metrics(
        ns(T0),
        [
            ("vmlinux", 0, 0x00, 30),
            ("vmlinux", 0, 0x30, 10),
            ("vmlinux", 0, 0x70, 20),
            ("vmlinux", 1, 0x00, 10),
            ("vmlinux", 1, 0x40, 10),
            ("vmlinux", 2, 0x00, 40),
            ("vmlinux", 3, 0x00, 5),
        ],
        user=50,
    )
    await wait_for_ack(agent, seq)
    yield agent
    await agent.close()


def _url(host_id, target="kernel"):
    return f"/api/v1/hosts/{host_id}/targets/{target}/layout-candidates"


async def _ranked(client, host_id, params, want_total):
    async def ready():
        body = (await client.get(_url(host_id), params=params)).json()
        return body if body.get("total_samples") == want_total else None

    return await wait_until(ready)


async def test_kernel_functions_rank_by_share_hot_lines_and_jump_density(client, kernel_host):
    body = await _ranked(client, kernel_host.host_id, RANGE, 175)
    assert body["weight"] == "samples" and body["l1i"] == {"size_bytes": 32768, "line_bytes": 64, "ways": 8}
    assert [i["name"] for i in body["items"]] == ["alpha", "beta", "gamma", "delta"]
    alpha, beta, gamma, delta = body["items"]
    # alpha: hot 0x30 + 0x40 + 0x10 = 128 bytes over lines 0x1000 and 0x1040; 2 jumps (at 0x00, 0x70).
    assert (alpha["samples"], alpha["share"]) == (60, pytest.approx(60 / 175))
    assert (alpha["hot_blocks"], alpha["blocks"], alpha["hot_bytes"], alpha["hot_jumps"]) == (3, 4, 128, 2)
    assert (alpha["hot_lines"], alpha["minimum_lines"], alpha["l1i_lines"]) == (2, 2, 512)
    assert alpha["l1i_share"] == pytest.approx(2 / 512) and alpha["branch_density"] == pytest.approx(1.0)
    assert alpha["taken_share"] is None and alpha["hot_basis"] == "samples"
    assert alpha["score"] == pytest.approx(60 / 175 * 2 * 1.0)
    assert alpha["address_hex"] == format(KERNEL_BASE + 0x1000, "x") and alpha["movable"]
    assert alpha["reason"] == "34.3% of samples; 2 hot lines (0.39% of the L1i, 2 if packed); 1.0 jumps per 64 B"
    assert any("no exact block-count measurement" in u for u in alpha["unavailable"])
    # beta: hot 0x10 + 0x40 = 80 bytes on lines 0x1100 and 0x1140; 2 jumps (a branch and a tail call).
    assert (beta["hot_bytes"], beta["hot_lines"], beta["minimum_lines"], beta["hot_jumps"]) == (80, 2, 2, 2)
    assert beta["branch_density"] == pytest.approx(2 * 64 / 80)
    assert beta["score"] == pytest.approx(20 / 175 * 2 * 1.6)
    # gamma: no jump, so block order cannot change it: score 0.
    assert (gamma["hot_jumps"], gamma["branch_density"], gamma["score"]) == (0, 0.0, 0.0)
    assert gamma["reason"] == (
        "22.9% of samples; 1 hot line (0.20% of the L1i, 1 if packed); "
        "no jump in its hot code: block order cannot change its fetch"
    )
    # delta: its bytes did not all decode: it cannot move, and ranks after every function that can.
    assert not delta["movable"] and delta["kept"]["plan_id"] is None and "did not decode" in delta["kept"]["rule"]
    assert delta["reason"].startswith("cannot move")


async def test_an_exact_block_count_measurement_gives_the_taken_share_and_the_hot_blocks(backend, client, kernel_host):
    host_id = kernel_host.host_id
    mid = await _measure_blocks(client, host_id, "kernel", [(kernel_host.modules[0][3], 1)])
    # beta called 100 times: 75 fall through 0x00 -> 0x10, 25 jump to 0x40; all leave 0x40 by its tail call.
    edges = [
        _edge(0, pb.EDGE_KIND_ENTRY, 100, to=0),
        _edge(0, pb.EDGE_KIND_FALLTHROUGH, 75, 0, 0x10),
        _edge(0, pb.EDGE_KIND_TAKEN, 25, 0, 0x40),
        _edge(0, pb.EDGE_KIND_FALLTHROUGH, 75, 0x10, 0x40),
        _edge(0, pb.EDGE_KIND_TAIL_CALL, 100, 0x40),
    ]
    seq = await kernel_host.send_measurement(
        mid, time.time_ns() - 2 * 10**9, [(0, 100, 0), (1, 100, 0), (2, 75, 0), (3, 100, 0)], edges=edges
    )
    await wait_for_ack(kernel_host, seq)
    body = (await client.get(_url(host_id), params=RANGE)).json()
    beta = next(i for i in body["items"] if i["name"] == "beta")
    # Of the 200 jumps executed (100 at 0x00, 100 at 0x40), 25 + 100 jumped.
    assert beta["measurement_id"] == mid and beta["taken_share"] == pytest.approx(125 / 200)
    assert beta["jump_executions"] == 200
    # The exact counts make all three blocks hot: 0x10 + 0x30 + 0x40 = 128 bytes, still 2 lines.
    assert (beta["hot_basis"], beta["hot_blocks"], beta["hot_bytes"], beta["hot_lines"]) == ("exact_counts", 3, 128, 2)
    assert beta["score"] == pytest.approx(20 / 175 * 2 * (2 * 64 / 128) * 0.625)
    assert "62% of jumps taken" in beta["reason"]


async def test_a_process_ranks_its_measured_functions_and_marks_what_a_plan_kept(backend, client, unique):
    host_id = f"layp-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    kept_at = format(PROCESS_BASE + 0x1100, "#x")  # srv_fn_1

    def keep_srv_fn_1(plan):
        plan["kept_in_place"] = [{"function": "srv_fn_1", "address": kept_at, "rule": "switch table", "detail": ""}]

    agent.plan_edit = keep_srv_fn_1
    r = await client.post(
        f"/api/v1/hosts/{host_id}/plans",
        json={"target": TARGET, "digest": digest, "function_index": 2, "seconds": 1},
    )
    assert r.status_code == 202, r.text
    plan = await _until(client, host_id, r.json()["id"], "ready", "failed")
    assert plan["state"] == "ready", plan["error"]
    mid = await _measure_blocks(client, host_id, TARGET, [(digest, 0), (digest, 1)])

    def calls(row, n, jumped):
        """srv_fn_*: block 0 falls through to 0x10 or jumps to 0x20; 0x10 falls through to 0x20."""
        return [
            _edge(row, pb.EDGE_KIND_ENTRY, n, to=0),
            _edge(row, pb.EDGE_KIND_FALLTHROUGH, n - jumped, 0, 0x10),
            _edge(row, pb.EDGE_KIND_TAKEN, jumped, 0, 0x20),
            _edge(row, pb.EDGE_KIND_FALLTHROUGH, n - jumped, 0x10, 0x20),
            _edge(row, pb.EDGE_KIND_RETURN, n, 0x20),
        ]

    # srv_fn_0: 10 calls, 6 jump; srv_fn_1 (rows 4..7): 20 calls, none jumps.
    values = [(0, 10, 0), (1, 10, 0), (2, 4, 0), (3, 10, 0), (4, 20, 0), (5, 20, 0), (6, 20, 0), (7, 20, 0)]
    seq = await agent.send_measurement(mid, time.time_ns() - 2 * 10**9, values, edges=calls(0, 10, 6) + calls(4, 20, 0))
    await wait_for_ack(agent, seq)

    body = (await client.get(_url(host_id, TARGET))).json()
    assert body["weight"] == "exact_counts" and body["total_samples"] is None
    assert [i["name"] for i in body["items"]] == ["srv_fn_0", "srv_fn_1"]
    fn0, fn1 = body["items"]
    # Instructions executed (3, 2 and 4 per block): srv_fn_0 10*3 + 4*2 + 10*4 = 78; srv_fn_1 20*9 = 180.
    assert fn0["counted_share"] == pytest.approx(78 / 258) and fn1["counted_share"] == pytest.approx(180 / 258)
    assert fn0["samples"] is None and fn0["share"] is None
    assert any("sampled share unavailable" in u for u in fn0["unavailable"])
    # 0x10 + 0x10 + 0x20 bytes on one line, one jump; 6 of 10 jumped.
    assert (fn0["hot_bytes"], fn0["hot_lines"], fn0["hot_jumps"], fn0["taken_share"]) == (64, 1, 1, 0.6)
    assert fn0["score"] == pytest.approx(78 / 258 * 1 * 1.0 * 0.6) and fn0["movable"]
    assert not fn1["movable"] and fn1["kept"] == {"plan_id": plan["id"], "rule": "switch table", "detail": ""}
    assert fn1["reason"] == "cannot move: switch table"
    await agent.close()


@pytest.mark.parametrize(
    "target, params",
    [
        ("kernel", {"limit": 0}),
        ("kernel", {"limit": 501}),
        ("kernel", {"limit": "many"}),
        ("kernel", {"window_s": 0}),
        ("kernel", {"from": "yesterday", "to": "today"}),
        ("p12", {}),
        ("kernel;drop", {}),
    ],
)
async def test_malformed_queries_are_422(client, kernel_host, target, params):
    r = await client.get(_url(kernel_host.host_id, target), params=params)
    assert r.status_code == 422, r.text


async def test_an_unknown_target_or_host_is_404(client, kernel_host):
    assert (await client.get(_url(kernel_host.host_id, "p1-2"))).status_code == 404
    assert (await client.get(_url("no-such-host"))).status_code == 404


async def test_layout_candidates_need_a_signed_in_user(anon, kernel_host):
    r = await anon.get(_url(kernel_host.host_id), params=RANGE)
    assert r.status_code == 401
