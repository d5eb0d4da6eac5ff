# SPDX-License-Identifier: Apache-2.0
"""The fleet's first slice (issue 19) against the real backend and its embedded Postgres: host labels
reported in Hello (bad ones attacked: NUL, 10 MB, too many, a bad key, twice the same key) and edited by an
admin over REST (audited; a non-admin's edit is 403), hosts grouped by kernel build and filtered by label,
and a group's hot code across its hosts read from the rollups. Every host here is a scripted agent
(tests.scripted_agent), named `scripted-…`."""

import time
from datetime import UTC, datetime, timedelta

import grpc
import httpx
import pytest
from sqlalchemy import text

from app.protocol.proto import pb
from app.storage import samples, stacks
from app.storage.samples import TimeRange
from app.storage.series import rollups
from tests.api.routes.test_limits import _raw_post
from tests.conftest import make_user, token_for
from tests.grpc.test_plans import TARGET, _approved, _client_as, _until
from tests.scripted_agent import wait_catalog_complete, wait_for_ack, wait_until

# Within the sample retention, minute-aligned, and far enough back that its minutes are complete.
T0 = (datetime.now(UTC) - timedelta(hours=2)).replace(second=0, microsecond=0)


def ns(t: datetime) -> int:
    return int(t.timestamp()) * 1_000_000_000


async def _refused(backend, host_id: str, labels: list[tuple[str, str]]) -> grpc.aio.AioRpcError:
    """Say Hello with these labels; return the error the stream ends with."""
    agent = await backend.agent(host_id)
    hello = agent.hello()
    hello.labels.extend(pb.Label(key=k, value=v) for k, v in labels)
    call = agent.open()
    await call.write(pb.AgentMessage(hello=hello))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    await agent.channel.close()
    return err.value


async def _nothing_stored(client, host_id: str) -> None:
    """The host is as its enrolment left it: no label, never connected, nothing of the Hello kept."""
    r = await client.get(f"/api/v1/hosts/{host_id}")
    assert r.status_code == 200, r.text
    host = r.json()
    assert host["labels"] == {} and host["agent_labels"] == {}
    assert host["connected_at"] is None and host["kernel_release"] == "" and host["online"] is False


async def test_hello_labels_are_stored_as_the_hosts_labels(backend, client, unique):
    agent = await backend.agent(f"scripted-lab-{unique}", labels={"role": "db", "region": "eu-west", "rack": "r12"})
    await agent.connect()
    try:
        r = await client.get(f"/api/v1/hosts/{agent.host_id}")
        assert r.status_code == 200, r.text
        host = r.json()
        assert host["labels"] == {"role": "db", "region": "eu-west", "rack": "r12"}
        assert host["agent_labels"] == host["labels"]
        assert host["labels_edited_by"] is None
    finally:
        await agent.close()


@pytest.mark.parametrize(
    ("labels", "reason"),
    [
        ([("role", "d\x00b")], "NUL or control character"),
        ([("role", "\x1b[31mred")], "NUL or control character"),
        ([("role", "x" * (10 * 1024 * 1024))], "10485760 characters long (at most 255)"),
        ([(f"k{i}", "v") for i in range(33)], "more than 32 labels"),
        ([("role=db", "x")], "label key 'role=db' must be"),
        ([("k" * 64, "x")], "64 characters long (at most 63)"),
        ([("role", "db"), ("role", "web")], "label role is given twice"),
    ],
    ids=["nul", "escape", "10MB", "too-many", "bad-key", "long-key", "twice"],
)
async def test_hello_with_bad_labels_is_refused_and_nothing_stored(backend, client, unique, labels, reason):
    host_id = f"scripted-badlab-{unique}"
    error = await _refused(backend, host_id, labels)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Hello.labels" in error.details() and reason in error.details(), error.details()
    assert len(error.details()) < 300  # the reason never echoes the value
    await _nothing_stored(client, host_id)


async def test_admin_edits_labels_audited_and_the_agents_reports_no_longer_change_them(backend, client, unique):
    agent = await backend.agent(f"scripted-edit-{unique}", labels={"role": "web"})
    await agent.connect()
    url = f"/api/v1/hosts/{agent.host_id}/labels"
    r = await client.put(url, json={"labels": {"role": "db", "rack": "r7"}})
    assert r.status_code == 200, r.text
    assert r.json()["labels"] == {"role": "db", "rack": "r7"}
    assert r.json()["agent_labels"] == {"role": "web"}
    assert r.json()["labels_edited_by"] == "admin"
    audit = (await client.get("/api/v1/audit", params={"action": "host_labels"})).json()
    mine = [a for a in audit if a["target"] == agent.host_id]
    assert mine and mine[0]["actor"] == "admin"
    assert mine[0]["detail"] == {"before": {"role": "web"}, "after": {"role": "db", "rack": "r7"}, "reset": False}

    # The agent reconnects reporting other labels: the admin's stay, the agent's are recorded.
    await agent.close()
    agent.labels = {"role": "cache"}
    await agent.connect()
    host = (await client.get(f"/api/v1/hosts/{agent.host_id}")).json()
    assert host["labels"] == {"role": "db", "rack": "r7"}
    assert host["agent_labels"] == {"role": "cache"}

    # Reset: the labels are the agent's again.
    r = await client.put(url, json={"labels": None})
    assert r.status_code == 200, r.text
    assert r.json()["labels"] == {"role": "cache"} and r.json()["labels_edited_by"] is None
    await agent.close()


@pytest.mark.parametrize("role", ["viewer", "operator", "approver"])
async def test_label_edit_by_a_non_admin_is_forbidden_and_changes_nothing(backend, client, unique, role):
    agent = await backend.agent(f"scripted-nonadmin-{unique}", labels={"role": "web"})
    await agent.connect()
    username, password = await make_user(client, role, unique)
    token = await token_for(backend.base_url, username, password)
    async with httpx.AsyncClient(base_url=backend.base_url, headers={"Authorization": f"Bearer {token}"}) as c:
        r = await c.put(f"/api/v1/hosts/{agent.host_id}/labels", json={"labels": {"role": "db"}})
    assert r.status_code == 403, r.text
    assert r.json()["detail"] == "This needs the admin role"
    assert (await client.get(f"/api/v1/hosts/{agent.host_id}")).json()["labels"] == {"role": "web"}
    await agent.close()


async def test_bad_labels_over_rest_are_refused_and_nothing_stored(backend, client, unique):
    agent = await backend.agent(f"scripted-restbad-{unique}", labels={"role": "web"})
    await agent.connect()
    url = f"/api/v1/hosts/{agent.host_id}/labels"
    # NUL anywhere in a request is refused by the request guard, before any route.
    r = await client.put(
        url, content=b'{"labels": {"role": "d\\u0000b"}}', headers={"content-type": "application/json"}
    )
    assert r.status_code == 400, r.text
    # 10 MB: larger than the request body limit, refused before it is read.
    value = b'{"labels": {"role": "' + b"x" * (10 * 1024 * 1024) + b'"}}'
    head = (
        f"PUT {url} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: {client.headers['Authorization']}\r\nContent-Length: {len(value)}\r\n\r\n"
    ).encode()
    response = await _raw_post(backend.base_url, head, [value[:1000]])  # refused before the rest is read
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    r = await client.put(url, json={"labels": {"role": "x" * 256}})
    assert r.status_code == 422 and "256 characters long (at most 255)" in r.text
    r = await client.put(url, json={"labels": {"role": "a\x07b"}})
    assert r.status_code == 422 and "NUL or control character" in r.text
    r = await client.put(url, json={"labels": {f"k{i}": "v" for i in range(33)}})
    assert r.status_code == 422 and "more than 32 labels" in r.text
    r = await client.put(url, json={"labels": {"bad key": "v"}})
    assert r.status_code == 422 and "label key 'bad key' must be" in r.text
    host = (await client.get(f"/api/v1/hosts/{agent.host_id}")).json()
    assert host["labels"] == {"role": "web"} and host["labels_edited_by"] is None
    await agent.close()


async def test_label_edit_of_an_unknown_host_is_404(client, unique):
    r = await client.put(f"/api/v1/hosts/scripted-none-{unique}/labels", json={"labels": {"role": "db"}})
    assert r.status_code == 404


@pytest.fixture
async def fleet(backend, client, unique):
    """Four scripted agents labelled suite=<unique>: three of kernel build A (two role=db, one role=web;
    the web one disconnected, so offline) and one of build B."""
    suite = {"suite": unique}
    specs = [
        ("a1", "A", {"role": "db", "rack": "r1"}),
        ("a2", "A", {"role": "db", "rack": "r2"}),
        ("a3", "A", {"role": "web", "rack": "r1"}),
        ("b1", "B", {"role": "db", "rack": "r3"}),
    ]
    agents = {}
    for name, build, labels in specs:
        agent = await backend.agent(
            f"scripted-{name}-{unique}",
            hostname=f"scripted-{name}-{unique}",
            kernel_tag=f"fleet-{build}-{unique}",
            labels={**suite, **labels},
        )
        await agent.connect()
        await wait_catalog_complete(client, agent.host_id)
        agents[name] = agent
    await agents["a3"].close()

    async def offline() -> bool:
        return not (await client.get(f"/api/v1/hosts/{agents['a3'].host_id}")).json()["online"]

    await wait_until(offline)
    yield agents
    for name, agent in agents.items():
        if name != "a3":
            await agent.close()


async def test_hosts_are_grouped_by_kernel_build_with_online_counts_and_labels(client, fleet, unique):
    r = await client.get("/api/v1/fleet/groups", params={"label": f"suite={unique}"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["total"] == 2 and body["labels"] == {"suite": unique}
    a, b = body["items"]  # most hosts first
    assert a["kernel_build_id"] == fleet["a1"].build_id and a["kernel_release"] == "6.18.0-test"
    assert (a["host_count"], a["online_count"], a["offline_count"]) == (3, 2, 1)
    assert [h["id"] for h in a["hosts"]] == [fleet[n].host_id for n in ("a1", "a2", "a3")]
    assert a["hosts"][2]["online"] is False
    assert a["hosts"][0]["labels"] == {"suite": unique, "role": "db", "rack": "r1"}
    assert b["kernel_build_id"] == fleet["b1"].build_id
    assert (b["host_count"], b["online_count"], b["offline_count"]) == (1, 1, 0)
    assert a["id"] != b["id"] and len(a["id"]) == 32


async def test_groups_filter_by_several_labels_sort_and_page(client, fleet, unique):
    r = await client.get("/api/v1/fleet/groups", params=[("label", f"suite={unique}"), ("label", "role=db")])
    items = r.json()["items"]
    assert [(g["kernel_build_id"], g["host_count"]) for g in items] == [
        (fleet["a1"].build_id, 2),
        (fleet["b1"].build_id, 1),
    ]
    r = await client.get(
        "/api/v1/fleet/groups", params=[("label", f"suite={unique}"), ("label", "rack=r1"), ("label", "role=web")]
    )
    assert [[h["id"] for h in g["hosts"]] for g in r.json()["items"]] == [[fleet["a3"].host_id]]
    r = await client.get(
        "/api/v1/fleet/groups", params={"label": f"suite={unique}", "sort": "hosts", "order": "asc", "limit": 1}
    )
    assert r.json()["total"] == 2 and [g["host_count"] for g in r.json()["items"]] == [1]
    r = await client.get(
        "/api/v1/fleet/groups", params={"label": f"suite={unique}", "sort": "hosts", "limit": 1, "offset": 1}
    )
    assert r.json()["total"] == 2 and [g["host_count"] for g in r.json()["items"]] == [1]
    r = await client.get("/api/v1/fleet/groups", params={"label": f"suite={unique}", "sort": "offline"})
    assert [g["offline_count"] for g in r.json()["items"]] == [1, 0]


@pytest.mark.parametrize("bad", ["role", "=db", "role=d\x01b", "bad key=x"])
async def test_a_bad_label_filter_is_400(client, bad):
    r = await client.get("/api/v1/fleet/groups", params={"label": bad})
    assert r.status_code == 400, r.text


async def test_groups_need_a_signed_in_user(anon):
    assert (await anon.get("/api/v1/fleet/groups")).status_code == 401


async def _send(agent, per_fn: dict[int, int], seconds: int = 60) -> None:
    """`seconds` one-second intervals from T0, each with these samples per kernel function index (block 0)."""
    for i in range(seconds):
        await agent.send_metrics(ns(T0 + timedelta(seconds=i)), [("vmlinux", f, 0, c) for f, c in per_fn.items()])


async def _group_of(client, agent, unique) -> str:
    groups = (await client.get("/api/v1/fleet/groups", params={"label": f"suite={unique}"})).json()["items"]
    return next(g["id"] for g in groups if g["kernel_build_id"] == agent.build_id)


async def test_hot_code_across_a_groups_hosts_comes_from_the_rollups(backend, client, fleet, unique):
    """Build A's online hosts sample for a minute from T0: a1 spends 90% in vfs_read (index 0) and 10% in
    ksys_read (1); a2 50% in vfs_read and 50% in rw_verify_area (4); build B's b1 (another group) only
    ksys_read. With hot meaning ≥ 20% of a host's busy samples, vfs_read is hot on both hosts of the
    group that sampled (2 of its 3 hosts), ksys_read on none, rw_verify_area on one."""
    a1, a2, b1 = fleet["a1"], fleet["a2"], fleet["b1"]
    await _send(a1, {0: 9, 1: 1})
    await _send(a2, {0: 5, 4: 5})
    await _send(b1, {1: 10})

    async def rolled() -> bool:
        await rollups.run_once(backend.runtime.engine)
        n = await backend.scalar(
            "SELECT coalesce(sum(count), 0) FROM sample_blocks_1m WHERE host_id = ANY(:h) AND bucket = :t",
            h=[a1.host_id, a2.host_id],
            t=T0,
        )
        return n == 60 * 20

    await wait_until(rolled)
    group = await _group_of(client, a1, unique)
    url = f"/api/v1/fleet/groups/{group}/hot-code"
    rng = {"from": T0.isoformat(), "to": (T0 + timedelta(minutes=2)).isoformat(), "min_share": 0.2}
    r = await client.get(url, params=rng)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["group"]["kernel_build_id"] == a1.build_id
    assert [h["id"] for h in body["hosts"]] == [a1.host_id, a2.host_id, fleet["a3"].host_id]
    assert [h["busy_samples"] for h in body["hosts"]] == [600, 600, 0]
    assert [s["grain"] for s in body["rollups"]] == ["1m"]
    assert body["functions"] == 3
    got = [(i["name"], i["samples"], i["hot_hosts"], round(i["host_share"], 4)) for i in body["items"]]
    assert got == [("vfs_read", 840, 2, 0.6667), ("rw_verify_area", 300, 1, 0.3333), ("ksys_read", 60, 0, 0.0)]
    cells = {
        i["name"]: [(c["host_id"], c["samples"], round(c["share"], 3), c["hot"]) for c in i["cells"]]
        for i in body["items"]
    }
    assert cells["vfs_read"] == [(a1.host_id, 540, 0.9, True), (a2.host_id, 300, 0.5, True)]
    assert cells["ksys_read"] == [(a1.host_id, 60, 0.1, False)]

    # Sorted by the share of hosts, then by name; paged.
    r = await client.get(url, params={**rng, "sort": "hosts", "order": "asc", "limit": 2, "offset": 1})
    assert [i["name"] for i in r.json()["items"]] == ["rw_verify_area", "vfs_read"]
    r = await client.get(url, params={**rng, "sort": "name", "order": "asc"})
    assert [i["name"] for i in r.json()["items"]] == ["ksys_read", "rw_verify_area", "vfs_read"]
    # Narrowed by label: only a2 (rack r2) is left.
    r = await client.get(url, params={**rng, "label": "rack=r2"})
    assert [(i["name"], i["samples"], i["hot_hosts"], i["host_share"]) for i in r.json()["items"]] == [
        ("rw_verify_area", 300, 1, 1.0),
        ("vfs_read", 300, 1, 1.0),
    ]

    # Nothing is read from the raw rows: with them deleted the answer is the same.
    async with backend.runtime.engine.begin() as conn:
        await conn.execute(
            text("DELETE FROM sample_intervals WHERE host_id = ANY(:h)"), {"h": [a1.host_id, a2.host_id]}
        )
    assert (await client.get(url, params=rng)).json()["items"] == body["items"]

    # A range that starts mid-minute is read from its whole minutes, and says so.
    r = await client.get(url, params={**rng, "from": (T0 + timedelta(seconds=30)).isoformat()})
    assert r.json()["covered_from"].startswith((T0 + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M"))
    assert r.json()["functions"] == 0 and r.json()["items"] == []


async def test_hot_code_of_an_unknown_group_is_404_and_a_bad_range_400(client):
    r = await client.get(f"/api/v1/fleet/groups/{'0' * 32}/hot-code")
    assert r.status_code == 404 and r.json()["detail"] == "Group not found"
    r = await client.get(
        f"/api/v1/fleet/groups/{'0' * 32}/hot-code",
        params={"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
    )
    assert r.status_code == 400
    r = await client.get("/api/v1/fleet/groups/not-a-group/hot-code")
    assert r.status_code == 422


# Call stacks of the fleet's flame graphs (frames leaf first, as tests.scripted_agent.stack_batch takes them):
# vfs_read ← ksys_read ← __x64_sys_read ← fn_00007 (the system call entry), vfs_read at two offsets (two
# stacks, one path once merged by function), do_sys_open ← fn_00007, and the idle task.
READ = [("k", 0, 0x4), ("k", 1, 0x18), ("k", 2, 0x14), ("k", 7, 0x20)]
READ_AT_A = [("k", 0, 0xA), ("k", 1, 0x18), ("k", 2, 0x14), ("k", 7, 0x20)]
OPEN = [("k", 5, 0x6), ("k", 7, 0x20)]
IDLE = [("k", 20, 0x8), ("k", 21, 0x30)]
READ_PATH = ("fn_00007", "__x64_sys_read", "ksys_read", "vfs_read")
OPEN_PATH = ("fn_00007", "do_sys_open")


def _tree(frames: list[dict], nodes: dict, *sides: str) -> dict[tuple[str, ...], tuple[int, ...]]:
    """{root-first names: (total and self per side)} of a tree in pre-order."""
    names = [f["name"] for f in frames]
    paths: list[tuple[str, ...]] = []
    out: dict[tuple[str, ...], tuple[int, ...]] = {}
    for i, (fr, par) in enumerate(zip(nodes["frame"], nodes["parent"], strict=True)):
        paths.append(() if par < 0 else paths[par] + (names[fr],))
        assert paths[-1] not in out, f"{paths[-1]} twice"
        out[paths[-1]] = tuple(nodes[f"{s}{k}"][i] for s in sides for k in ("total", "self"))
    return out


def _host_tree(fg: dict) -> dict[tuple[str, ...], tuple[int, int]]:
    """{root-first names: (total, self)} of a host's flame graph (its distinct paths merged, as the console does)."""
    names = [f["name"] for f in fg["frames"]]
    p = fg["paths"]
    out: dict[tuple[str, ...], tuple[int, int]] = {(): (0, 0)}
    at = 0
    for length, n in zip(p["length"], p["samples"], strict=True):
        path = tuple(names[f] for f in p["frame"][at : at + length])
        at += length
        for k in range(len(path) + 1):
            total, own = out.get(path[:k], (0, 0))
            out[path[:k]] = (total + n, own + (n if k == len(path) else 0))
    return out


@pytest.fixture
async def stacked(backend, client, fleet):
    """Two minutes of stacks from T0, one batch every 10 s: a1 reads (30 a batch, pid 100) with the idle task
    (20), and opens (10) in the second minute only; a2 reads with vfs_read at another offset (20, pid 300)
    and opens (10) in both; b1 (build B, another group) reads (50). Waits until the minute rollups hold them."""
    a1, a2, b1 = fleet["a1"], fleet["a2"], fleet["b1"]
    for i in range(12):
        t = ns(T0 + timedelta(seconds=10 * i))
        one = [(READ, 100, "dd", 0, 30), (IDLE, 0, "swapper/1", 1, 20)] + ([(OPEN, 100, "dd", 0, 10)] if i >= 6 else [])
        await a1.send_batch(a1.stack_batch(t, one))
        await a2.send_batch(a2.stack_batch(t, [(READ_AT_A, 300, "cat", 2, 20), (OPEN, 300, "cat", 2, 10)]))
        await b1.send_batch(b1.stack_batch(t, [(READ, 100, "dd", 0, 50)]))

    async def rolled() -> bool:
        await rollups.run_once(backend.runtime.engine)
        n = await backend.scalar(
            "SELECT coalesce(sum(count), 0) FROM stack_samples_1m WHERE host_id = ANY(:h) AND bucket >= :t",
            h=[a1.host_id, a2.host_id, b1.host_id],
            t=T0,
        )
        return n == 12 * (50 + 30 + 50) + 6 * 10

    await wait_until(rolled)
    return fleet


async def test_group_flame_graph_merges_the_hosts_stacks_by_function(backend, client, stacked, unique):
    a1, a2 = stacked["a1"], stacked["a2"]
    group = await _group_of(client, a1, unique)
    url = f"/api/v1/fleet/groups/{group}/flamegraph"
    rng = {"from": T0.isoformat(), "to": (T0 + timedelta(minutes=2)).isoformat()}
    r = await client.get(url, params=rng)
    assert r.status_code == 200, r.text
    fg = r.json()
    assert fg["group"]["kernel_build_id"] == a1.build_id
    assert fg["covered_from"].startswith(T0.strftime("%Y-%m-%dT%H:%M"))
    assert [(h["id"], h["samples"]) for h in fg["hosts"]] == [
        (a1.host_id, 420),
        (a2.host_id, 360),
        (stacked["a3"].host_id, 0),
    ]
    assert (fg["samples"], fg["undefined_samples"], fg["folded_samples"]) == (780, 0, 0)
    assert fg["filter"]["idle"] == "exclude"
    tree = _tree(fg["frames"], fg["nodes"], "")
    # vfs_read at two offsets on two hosts: one node; build B's host is not in the group.
    assert tree == {
        (): (780, 0),
        READ_PATH[:1]: (780, 0),
        READ_PATH[:2]: (600, 0),
        READ_PATH[:3]: (600, 0),
        READ_PATH: (600, 600),
        OPEN_PATH: (180, 180),
    }
    # The fleet's tree is the sum of its hosts' trees (each host's own flame graph over the same range).
    summed: dict[tuple[str, ...], tuple[int, int]] = {}
    for agent in (a1, a2):
        host = (await client.get(f"/api/v1/hosts/{agent.host_id}/flamegraph", params=rng)).json()
        for path, (total, own) in _host_tree(host).items():
            t0, s0 = summed.get(path, (0, 0))
            summed[path] = (t0 + total, s0 + own)
    assert summed == tree

    # The idle task included; the command filter; narrowed by label (rack r2: a2 only).
    r = await client.get(url, params={**rng, "idle": "include"})
    assert r.json()["samples"] == 780 + 240
    r = await client.get(url, params={**rng, "comm": "cat"})
    assert r.json()["samples"] == 360
    r = await client.get(url, params={**rng, "label": "rack=r2"})
    narrowed = r.json()
    assert [h["id"] for h in narrowed["hosts"]] == [a2.host_id] and narrowed["labels"] == {"rack": "r2"}
    assert _tree(narrowed["frames"], narrowed["nodes"], "")[READ_PATH] == (240, 240)

    # The group's rollup answers the whole group, idle or not; a command filter or a label narrowing the group
    # is read from the hosts' own rollups.
    assert fg["rollup"] == "group"
    assert [
        (await client.get(url, params={**rng, **extra})).json()["rollup"]
        for extra in ({"idle": "include"}, {"idle": "only"}, {"comm": "cat"}, {"label": "rack=r2"})
    ] == ["group", "group", "hosts", "hosts"]

    # Read from the rollups only: with the raw rows deleted the answer is the same.
    async with backend.runtime.engine.begin() as conn:
        await conn.execute(text("DELETE FROM stack_samples WHERE host_id = ANY(:h)"), {"h": [a1.host_id, a2.host_id]})
    assert (await client.get(url, params=rng)).json() == fg
    # A range with no whole rolled-up minute: nothing read, and it says so.
    r = await client.get(
        url, params={"from": (T0 + timedelta(seconds=10)).isoformat(), "to": (T0 + timedelta(seconds=50)).isoformat()}
    )
    assert r.status_code == 200 and r.json()["samples"] == 0 and r.json()["covered_from"] is None


async def _both_reads(backend, scope: stacks.GroupScope, hosts: list[str], idle: str) -> tuple:
    """Some of a group's hosts' stacks over the stacked fixture's two minutes read from the group's rollup
    (where it answers) and from the hosts' own rollups: (what the first read, and the two answers)."""
    flt = stacks.StackFilter(idle=idle)  # type: ignore[arg-type]
    end = T0 + timedelta(minutes=2)
    async with backend.runtime.sessionmaker() as session:
        fast = await stacks.group_stacks(session, hosts, T0, end, flt, scope)
        slow = await stacks.group_stacks(session, hosts, T0, end, flt)
    assert slow.rollup == "hosts"

    def answer(g: stacks.GroupStacks) -> tuple:
        return g.paths, g.samples, g.undefined, g.per_host, g.covered

    return fast.rollup, answer(fast), answer(slow)


async def test_group_rollup_answers_as_the_hosts_rollups_or_is_not_read(backend, client, stacked, unique):
    """The kernel-build group's stack rollup gives what the hosts' own rollups give, late batches included;
    when it cannot (a host of the group in the range ran another build, left the group, was deleted) the
    hosts' rollups are read instead."""
    a1, a2, a3 = stacked["a1"], stacked["a2"], stacked["a3"]
    group = await _group_of(client, a1, unique)
    hosts = [a1.host_id, a2.host_id, a3.host_id]
    scope = stacks.GroupScope(group, hosts)
    for idle in ("exclude", "include", "only"):
        rollup, fast, slow = await _both_reads(backend, scope, hosts, idle)
        assert rollup == "group" and fast == slow and fast[1] > 0, idle
        # Two of three hosts: the group's rollup less the third's own.
        rollup, fast, slow = await _both_reads(backend, scope, [a1.host_id, a3.host_id], idle)
        assert rollup == "group_less_hosts" and fast == slow and fast[1] > 0, idle
        # One of three: its own rollups.
        assert (await _both_reads(backend, scope, [a2.host_id], idle))[0] == "hosts"

    # A batch that arrives below the rollup watermark (an agent's resend): the ingest writer adds it to the
    # group's rollup as to the host's.
    seq = await a1.send_batch(a1.stack_batch(ns(T0 + timedelta(seconds=75)), [(OPEN, 100, "dd", 0, 7)]))
    await wait_for_ack(a1, seq)
    rollup, fast, slow = await _both_reads(backend, scope, hosts, "exclude")
    assert rollup == "group" and fast == slow and fast[1] == 780 + 7
    rollup, fast, slow = await _both_reads(backend, scope, [a1.host_id, a3.host_id], "exclude")
    assert rollup == "group_less_hosts" and fast == slow and fast[1] == 427

    url = f"/api/v1/fleet/groups/{group}/flamegraph"
    rng = {"from": T0.isoformat(), "to": (T0 + timedelta(minutes=2)).isoformat()}

    async def read(**extra: str) -> tuple[str, int, list[str]]:
        fg = (await client.get(url, params={**rng, **extra})).json()
        return fg["rollup"], fg["samples"], [h["id"] for h in fg["hosts"]]

    # role=db keeps a1 and a2 and leaves a3 out: the group's rollup less a3's.
    assert await read(label="role=db") == ("group_less_hosts", 787, [a1.host_id, a2.host_id])

    # a2 rebooted into another kernel (its hello records the new build): the group is a1 and a3 now, and a2's
    # samples of the range are in the group's rollup; the hosts' rollups answer, without them.
    build = await backend.scalar("SELECT kernel_build_id FROM hosts WHERE id = :h", h=a2.host_id)
    async with backend.runtime.engine.begin() as conn:
        await conn.execute(text("UPDATE hosts SET kernel_build_id = 'rebooted' WHERE id = :h"), {"h": a2.host_id})
    assert await read() == ("hosts", 427, [a1.host_id, a3.host_id])
    async with backend.runtime.engine.begin() as conn:
        await conn.execute(text("UPDATE hosts SET kernel_build_id = :b WHERE id = :h"), {"b": build, "h": a2.host_id})
    assert await read() == ("group", 787, hosts)

    # A database whose group rows begin after the range's start (a node upgraded with stack rollups stored):
    # read per host.
    async with backend.runtime.engine.begin() as conn:
        await conn.execute(text("UPDATE stack_group_state SET since = :t"), {"t": T0 + timedelta(minutes=1)})
    try:
        assert await read() == ("hosts", 787, hosts)
    finally:
        async with backend.runtime.engine.begin() as conn:
            await conn.execute(text("UPDATE stack_group_state SET since = '-infinity'"))
    assert await read() == ("group", 787, hosts)

    # a2 retired (it leaves the group), then deleted (its rows go, the group's rollup keeps its samples).
    assert (await client.post(f"/api/v1/hosts/{a2.host_id}/retire")).status_code == 204
    assert await read() == ("hosts", 427, [a1.host_id, a3.host_id])
    assert (await client.delete(f"/api/v1/hosts/{a2.host_id}")).status_code == 204
    assert await read() == ("hosts", 427, [a1.host_id, a3.host_id])
    rollup, fast, slow = await _both_reads(
        backend, stacks.GroupScope(group, [a1.host_id, a3.host_id]), [a1.host_id], "include"
    )
    assert rollup == "hosts" and fast == slow
    assert await read(label="role=db") == ("hosts", 427, [a1.host_id])


async def test_group_compare_by_label_and_by_range(client, stacked, unique):
    a1, a2, a3 = stacked["a1"], stacked["a2"], stacked["a3"]
    group = await _group_of(client, a1, unique)
    url = f"/api/v1/fleet/groups/{group}/flamegraph/diff"
    rng = {"from": T0.isoformat(), "to": (T0 + timedelta(minutes=2)).isoformat()}
    # One rack against the others.
    r = await client.get(url, params={**rng, "a_label": "rack=r1", "b_without": "rack=r1"})
    assert r.status_code == 200, r.text
    d = r.json()
    assert [h["id"] for h in d["a"]["hosts"]] == [a1.host_id, a3.host_id]
    assert [h["id"] for h in d["b"]["hosts"]] == [a2.host_id]
    assert (d["a"]["labels"], d["b"]["without"]) == ({"rack": "r1"}, {"rack": "r1"})
    assert (d["a_samples"], d["b_samples"]) == (420, 360)
    # Side A keeps two of three hosts (the group's rollup less a2's), side B one (its own rollups).
    assert (d["a"]["rollup"], d["b"]["rollup"]) == ("group_less_hosts", "hosts")
    tree = _tree(d["frames"], d["nodes"], "a_", "b_")
    assert tree[READ_PATH] == (360, 360, 240, 240)
    assert tree[OPEN_PATH] == (60, 60, 120, 120)
    assert tree[()][0::2] == (420, 360)

    # Before and after: the whole group, its first minute against its second.
    m1 = (T0 + timedelta(minutes=1)).isoformat()
    r = await client.get(url, params={"a_from": rng["from"], "a_to": m1, "b_from": m1, "b_to": rng["to"]})
    assert r.status_code == 200, r.text
    d = r.json()
    assert (d["a_samples"], d["b_samples"]) == (360, 420)
    assert (d["a"]["rollup"], d["b"]["rollup"]) == ("group", "group")
    tree = _tree(d["frames"], d["nodes"], "a_", "b_")
    assert tree[OPEN_PATH][0::2] == (60, 120) and tree[READ_PATH][0::2] == (300, 300)
    assert d["a"]["to"].startswith(m1[:16]) and d["b"]["from"].startswith(m1[:16])

    # The group's label filter applies to both sides; a side's own labels must agree with it.
    r = await client.get(url, params={**rng, "label": "role=db", "a_label": "rack=r1"})
    assert [h["id"] for h in r.json()["a"]["hosts"]] == [a1.host_id]
    assert [h["id"] for h in r.json()["b"]["hosts"]] == [a1.host_id, a2.host_id]
    r = await client.get(url, params={**rng, "label": "rack=r2", "a_label": "rack=r1"})
    assert r.status_code == 400 and "two values of rack" in r.text


async def test_group_flame_graphs_refuse_bad_input(client, fleet, unique):
    group = await _group_of(client, fleet["a1"], unique)
    for path in ("flamegraph", "flamegraph/diff"):
        url = f"/api/v1/fleet/groups/{group}/{path}"
        for bad in ("role", "=db", "role=d\x01b", "bad key=x"):
            r = await client.get(url, params={"label": bad})
            assert r.status_code == 400, (path, bad, r.text)
        # NUL anywhere in a request is refused by the request guard, before any route.
        r = await client.get(url, params={"label": "role=d\x00b"})
        assert r.status_code == 400, r.text
        r = await client.get(f"/api/v1/fleet/groups/{'0' * 32}/{path}")
        assert r.status_code == 404 and r.json()["detail"] == "Group not found"
        r = await client.get(url, params={"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"})
        assert r.status_code == 400
        assert (await client.get(url, params={"idle": "sometimes"})).status_code == 422
        assert (await client.get(url, params={"window_s": 10})).status_code == 422
        assert (await client.get(f"/api/v1/fleet/groups/not-a-group/{path}")).status_code == 422
    url = f"/api/v1/fleet/groups/{group}/flamegraph/diff"
    for params in ({"a_label": "rack"}, {"b_without": "x=\x07"}, {"a_label": ["rack=r1", "rack=r2"]}):
        assert (await client.get(url, params=params)).status_code == 400, params
    r = await client.get(url, params={"a_from": T0.isoformat()})
    assert r.status_code == 400 and "range A needs both from and to" in r.text
    r = await client.get(url, params={"b_from": T0.isoformat(), "b_to": (T0 - timedelta(minutes=1)).isoformat()})
    assert r.status_code == 400 and "range B" in r.text


async def test_group_flame_graphs_need_a_signed_in_user(anon):
    for path in ("flamegraph", "flamegraph/diff"):
        assert (await anon.get(f"/api/v1/fleet/groups/{'0' * 32}/{path}")).status_code == 401


async def test_outlier_hosts_of_a_groups_hot_code_are_listed_with_the_rule(backend, client, unique):
    """Thirteen hosts of one build sample from T0: on every host vfs_read (index 0) takes half the busy
    samples; ksys_read (1) takes 2.5% on ten hosts and 25% (ten times as much) on two, o1 and o2; the
    thirteenth, tiny, sampled one second with ksys_read its main function (5 samples: too few to say).
    Only ksys_read on o1 and o2 are outliers; vfs_read's uniform load gives none."""
    names = [f"n{i:02d}" for i in range(10)] + ["o1", "o2", "tiny"]
    agents = {}
    try:
        for name in names:
            agent = await backend.agent(
                f"scripted-out-{name}-{unique}",
                hostname=f"scripted-out-{name}-{unique}",
                kernel_tag=f"outliers-{unique}",
                labels={"suite": unique},
            )
            await agent.connect()
            await wait_catalog_complete(client, agent.host_id)
            agents[name] = agent
        for name, agent in agents.items():
            if name == "tiny":
                await _send(agent, {1: 5, 0: 1}, seconds=1)
            elif name in ("o1", "o2"):
                await _send(agent, {0: 20, 1: 10, 4: 10}, seconds=10)
            else:
                await _send(agent, {0: 20, 1: 1, 4: 19}, seconds=10)
        ids = [a.host_id for a in agents.values()]

        async def rolled() -> bool:
            await rollups.run_once(backend.runtime.engine)
            n = await backend.scalar(
                "SELECT coalesce(sum(count), 0) FROM sample_blocks_1m WHERE host_id = ANY(:h) AND bucket = :t",
                h=ids,
                t=T0,
            )
            return n == 12 * 10 * 40 + 6

        await wait_until(rolled)
        group = await _group_of(client, agents["o1"], unique)
        rng = {"from": T0.isoformat(), "to": (T0 + timedelta(minutes=2)).isoformat(), "min_share": 0.02}
        r = await client.get(f"/api/v1/fleet/groups/{group}/hot-code", params=rng)
        assert r.status_code == 200, r.text
        body = r.json()
        rule = body["outlier_rule"]
        assert (rule["min_samples"], rule["min_ratio"], rule["min_z"], rule["min_hosts"]) == (50, 3.0, 3.5, 5)
        assert rule["min_share"] == 0.02 and "median" in rule["text"]
        o1, o2 = agents["o1"].host_id, agents["o2"].host_id
        assert body["outliers_total"] == 2
        got = [(o["name"], o["host_id"], o["samples"], o["share"], o["median_share"]) for o in body["outliers"]]
        assert sorted(got) == sorted([("ksys_read", o1, 100, 0.25, 0.025), ("ksys_read", o2, 100, 0.25, 0.025)]), got
        assert body["outliers"][0]["ratio"] == pytest.approx(10.0)
        assert body["outliers"][0]["hostname"].startswith("scripted-out-o")
        by_name = {i["name"]: i for i in body["items"]}
        assert sorted(by_name["ksys_read"]["outlier_hosts"]) == sorted([o1, o2])
        assert by_name["ksys_read"]["median_share"] == pytest.approx(0.025)
        assert {c["host_id"] for c in by_name["ksys_read"]["cells"] if c["outlier"]} == {o1, o2}
        tiny = next(c for c in by_name["ksys_read"]["cells"] if c["host_id"] == agents["tiny"].host_id)
        assert tiny["share"] == pytest.approx(5 / 6) and not tiny["outlier"]
        for name in ("vfs_read", "rw_verify_area"):
            assert by_name[name]["outlier_hosts"] == [] and by_name[name]["median_share"] is None
            assert not any(c["outlier"] for c in by_name[name]["cells"])
        # The group's list covers every ranked function, not the page: a page of vfs_read alone still lists them.
        r = await client.get(f"/api/v1/fleet/groups/{group}/hot-code", params={**rng, "limit": 1})
        assert [i["name"] for i in r.json()["items"]] == ["vfs_read"] and r.json()["outliers_total"] == 2
    finally:
        for agent in agents.values():
            await agent.close()


async def _installed_with_windows(backend, client, approver, host_id, unique, calls_before, calls_after):
    """A scripted host labelled suite=<unique> with a process whose plan of srv_fn_2 is made, approved and
    installed (1 s windows, no guard): the before window's one second with `calls_before` calls at 4 µs
    each, the after window's with `calls_after` calls at 3 µs each. Returns the agent and the plan's id."""
    agent = await backend.agent(host_id, hostname=host_id, kernel_tag=f"k-{host_id}", labels={"suite": unique})
    await agent.connect()
    r = await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 4242})
    assert r.status_code == 202, r.text

    async def ready():
        mods = (await client.get(f"/api/v1/hosts/{host_id}/modules", params={"target": TARGET})).json()
        return bool(mods) and mods[0]["complete"]

    await wait_until(ready)
    plan_id = await _approved(client, approver, host_id, agent.process[3], 2)
    base = f"/api/v1/hosts/{host_id}/plans/{plan_id}"
    r = await client.post(f"{base}/install", json={"window_s": 1, "guard": False})
    assert r.status_code == 200, r.text

    async def window(which):
        p = (await client.get(base)).json()
        mid = p[f"{which}_measurement"]
        return mid if mid is not None and mid in agent.measurements else None

    before = await wait_until(lambda: window("before"))
    await wait_for_ack(
        agent, await agent.send_measurement(before, time.time_ns() - 10**9, [(0, calls_before, 4e3 * calls_before)])
    )
    p = await _until(client, host_id, plan_id, "installed", "install_failed")
    assert p["state"] == "installed", p["error"]
    after = await wait_until(lambda: window("after"))
    await wait_for_ack(
        agent, await agent.send_measurement(after, time.time_ns() - 10**9, [(0, calls_after, 3e3 * calls_after)])
    )

    async def compared():
        # The after window's figures, and its end: the backend stops it once its second is over, so a read before
        # that says "running" and one after says "stopped" (the fleet's list and the plan's page must agree).
        c = (await client.get(base)).json()["comparison"]
        done = c and c["after"] and c["after"]["calls"] == calls_after and c["after"]["state"] == "stopped"
        return c if done else None

    await wait_until(compared)
    return agent, plan_id


async def test_installed_plans_across_the_fleet_with_since_and_before_after(backend, client, unique):
    """Two hosts run a plan each (made, approved by an approver, installed by the admin): the fleet's list
    has both, latest install first, with since when, who, and the root's before/after; a reverted plan is
    left out unless recently reverted ones are asked for; a plan whose windows are gone says why it has no
    comparison; filters by group, build and label; bad parameters are 422 (a bad label 400)."""
    ap_user = await make_user(client, "approver", unique)
    approver = _client_as(backend, await token_for(backend.base_url, *ap_user))
    agents = []
    async with approver:
        a1, p1 = await _installed_with_windows(backend, client, approver, f"scripted-fp1-{unique}", unique, 1000, 1250)
        agents.append(a1)
        a2, p2 = await _installed_with_windows(backend, client, approver, f"scripted-fp2-{unique}", unique, 500, 400)
        agents.append(a2)
    try:
        url = "/api/v1/fleet/plans"
        r = await client.get(url, params={"label": f"suite={unique}"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["total"] == 2 and body["reverted_within_h"] == 0
        second, first = body["items"]  # the latest install first
        assert (first["plan_id"], first["host_id"], first["hostname"]) == (p1, a1.host_id, a1.host_id)
        assert (second["plan_id"], second["host_id"]) == (p2, a2.host_id)
        assert first["installed_at"] <= second["installed_at"]
        for item in body["items"]:
            assert item["state"] == "installed" and item["root_name"] == "srv_fn_2"
            assert item["target_id"] == TARGET and item["target_kind"] == "process"
            assert item["installed_by"] == "admin" and item["approved_by"] == ap_user[0]
            assert item["rollout_id"] is None and item["comparison_missing"] is None
            assert item["kernel_build_id"] == agents[0 if item is first else 1].build_id
        c1, c2 = first["comparison"], second["comparison"]
        assert c1["before"]["calls"] == 1000 and c1["after"]["calls"] == 1250
        assert c1["before"]["calls_per_s"] == pytest.approx(1000) and c1["after"]["calls_per_s"] == pytest.approx(1250)
        assert c1["before"]["wall_ns_per_call"] == pytest.approx(4000)
        assert c1["after"]["wall_ns_per_call"] == pytest.approx(3000)
        assert c1["change"] == {"calls_per_s": pytest.approx(0.25), "wall_ns_per_call": pytest.approx(-0.25)}
        assert c2["change"] == {"calls_per_s": pytest.approx(-0.2), "wall_ns_per_call": pytest.approx(-0.25)}
        assert c1["emulated"] is None
        # The figures are the plan's page's (read there window by window, here for the whole page at once).
        for item, (host, plan) in ((first, (a1.host_id, p1)), (second, (a2.host_id, p2))):
            page = (await client.get(f"/api/v1/hosts/{host}/plans/{plan}")).json()["comparison"]
            for which in ("before", "after"):
                keys = ("measurement_id", "state", "seconds", "calls", "calls_per_s", "wall_ns_per_call", "unavailable")
                assert {k: item["comparison"][which][k] for k in keys} == {k: page[which][k] for k in keys}
            assert item["comparison"]["change"] == {k: page["change"][k] for k in ("calls_per_s", "wall_ns_per_call")}

        # Filters: the first host's group, its build id; a label no host carries.
        r = await client.get(url, params={"group_id": first["group_id"]})
        assert [i["plan_id"] for i in r.json()["items"]] == [p1]
        r = await client.get(url, params={"kernel_build_id": a2.build_id, "label": f"suite={unique}"})
        assert [i["plan_id"] for i in r.json()["items"]] == [p2]
        r = await client.get(url, params={"label": f"suite=none-{unique}"})
        assert r.json() == {**r.json(), "total": 0, "items": []}
        r = await client.get(url, params={"label": f"suite={unique}", "limit": 1, "offset": 1})
        assert r.json()["total"] == 2 and [i["plan_id"] for i in r.json()["items"]] == [p1]

        # Windows no longer stored: no comparison, and why.
        async with backend.runtime.engine.begin() as conn:
            kept = (
                await conn.execute(
                    text("SELECT before_measurement, after_measurement FROM plans WHERE id = :id"), {"id": p1}
                )
            ).one()
            await conn.execute(
                text("UPDATE plans SET before_measurement = 'gone-1', after_measurement = 'gone-2' WHERE id = :id"),
                {"id": p1},
            )
        item = next(
            i
            for i in (await client.get(url, params={"label": f"suite={unique}"})).json()["items"]
            if i["plan_id"] == p1
        )
        assert item["comparison"] is None and "no longer stored" in item["comparison_missing"]
        async with backend.runtime.engine.begin() as conn:
            await conn.execute(
                text("UPDATE plans SET before_measurement = :b, after_measurement = :a WHERE id = :id"),
                {"id": p1, "b": kept[0], "a": kept[1]},
            )

        # The second plan reverted: gone from the list, back with the recently reverted ones.
        r = await client.post(f"/api/v1/hosts/{a2.host_id}/plans/{p2}/revert")
        assert r.status_code == 200, r.text
        await _until(client, a2.host_id, p2, "reverted")
        r = await client.get(url, params={"label": f"suite={unique}"})
        assert [i["plan_id"] for i in r.json()["items"]] == [p1]
        r = await client.get(url, params={"label": f"suite={unique}", "reverted_within_h": 1})
        got = {i["plan_id"]: (i["state"], i["reverted_by"]) for i in r.json()["items"]}
        assert got == {p1: ("installed", None), p2: ("reverted", "admin")}
        assert next(i for i in r.json()["items"] if i["plan_id"] == p2)["comparison"]["after"]["calls"] == 400

        # The windows' sums for many measurements at once (samples.measurement_sums) are measurement_values'
        # over the raw rows, the minute and the hour rollups: intervals of p1's before window sent at an old
        # hour, an old minute and now (late rows below the watermarks are summed into the rollups at once).
        mid = kept[0]
        hour = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
        for t, calls in ((hour + timedelta(seconds=5), 70), (T0 + timedelta(seconds=7), 30)):
            await wait_for_ack(a1, await a1.send_measurement(mid, ns(t), [(0, calls, 5e3 * calls)]))
        async with backend.runtime.engine.connect() as conn:
            wm_1m, wm_1h = await rollups.watermarks(conn)
        if wm_1m == wm_1h:
            # The first minute of an hour: the hour is rolled up and no minute above it yet, so a range read
            # has no minute part. Roll two minutes up (what comes later for them is summed in as late rows).
            await rollups.run_once(backend.runtime.engine, now=wm_1m + timedelta(minutes=2), lag_s=0)
            async with backend.runtime.engine.connect() as conn:
                wm_1m, wm_1h = await rollups.watermarks(conn)
        rng = TimeRange(hour, max(datetime.now(UTC), wm_1m) + timedelta(seconds=5))
        async with backend.runtime.sessionmaker() as session:
            wm_1m, wm_1h = await rollups.watermarks(await session.connection())
            assert {src for src, _lo, _hi in samples.plan(rng.start, rng.end, wm_1m, wm_1h)} == {"1h", "1m", "raw"}
            one = await samples.measurement_values(session, mid, rng)
            both = await samples.measurement_sums(session, [(kept[1], rng), (mid, rng)], 0)
        assert both[1]["measured_seconds"] == one["measured_seconds"] == 3.0
        assert both[1]["values"] == next(x["values"] for x in one["resources"] if x["resource"] == 0)
        assert both[1]["values"]["count"] == 1100 and both[0]["values"]["count"] == 1250
    finally:
        for agent in agents:
            await agent.close()


@pytest.mark.parametrize(
    "params",
    [
        {"group_id": "not-a-group"},
        {"kernel_build_id": "xyz"},
        {"limit": 0},
        {"limit": 201},
        {"offset": -1},
        {"reverted_within_h": -1},
        {"reverted_within_h": 721},
    ],
)
async def test_installed_plans_refuse_bad_parameters(client, params):
    assert (await client.get("/api/v1/fleet/plans", params=params)).status_code == 422


async def test_installed_plans_need_a_signed_in_user_and_any_reads_them(backend, client, anon, unique):
    assert (await anon.get("/api/v1/fleet/plans")).status_code == 401
    assert (await client.get("/api/v1/fleet/plans", params={"label": "bad"})).status_code == 400
    username, password = await make_user(client, "viewer", unique)
    token = await token_for(backend.base_url, username, password)
    async with httpx.AsyncClient(base_url=backend.base_url, headers={"Authorization": f"Bearer {token}"}) as c:
        r = await c.get("/api/v1/fleet/plans")
    assert r.status_code == 200, r.text
