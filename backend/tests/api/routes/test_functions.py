# SPDX-License-Identifier: Apache-2.0
"""The function routes over a catalog the scripted agent stored: search, paging, sorting, module filter,
detail with blocks/successors/callees, per-block samples, hotness and top functions, and instructions
fetched from the live agent once and then served from the cache."""

import time

import pytest

from app.protocol.proto import pb
from tests.scripted_agent import KERNEL_BASE, MODULE_BASE, wait_catalog_complete, wait_for_ack, wait_until


@pytest.fixture
async def host(backend, client, unique):
    agent = await backend.agent(f"fn-{unique}", kernel_tag=f"fn-{unique}")
    await agent.connect()

    await wait_catalog_complete(client, f"fn-{unique}")
    yield agent
    await agent.close()


async def _fid(client, host_id, name):
    items = (await client.get(f"/api/v1/hosts/{host_id}/functions", params={"q": name})).json()["items"]
    return next(f for f in items if f["name"] == name)


async def test_search_is_case_insensitive_with_exact_match_first(client, host):
    r = await client.get(f"/api/v1/hosts/{host.host_id}/functions", params={"q": "VFS_READ"})
    assert r.status_code == 200
    body = r.json()
    assert body["total"] == 2
    assert [f["name"] for f in body["items"]] == ["vfs_read", "vfs_read_iter"]
    # "%" and "_" are literal characters, not wildcards.
    r = await client.get(f"/api/v1/hosts/{host.host_id}/functions", params={"q": "%"})
    assert r.json()["total"] == 0


async def test_addresses_are_absolute_with_hex_twins(client, host):
    fns = host.modules[0][2]
    f = await _fid(client, host.host_id, "vfs_read")
    assert f["address"] == KERNEL_BASE + fns[0].offset
    assert f["address_hex"] == format(KERNEL_BASE + fns[0].offset, "x")
    assert f["module"] == "vmlinux" and f["block_count"] == 3 and f["size"] == fns[0].size
    assert f["undecodable"] is False and f["samples_per_sec"] == 0


async def test_paging_and_sorting(client, host):
    url = f"/api/v1/hosts/{host.host_id}/functions"
    first = (await client.get(url, params={"limit": 10, "offset": 0, "sort": "name"})).json()
    second = (await client.get(url, params={"limit": 10, "offset": 10, "sort": "name"})).json()
    assert first["total"] == second["total"] == 54
    names = [f["name"] for f in first["items"] + second["items"]]
    assert names == sorted(names) and len(set(names)) == 20
    by_addr = (await client.get(url, params={"limit": 100, "sort": "address"})).json()["items"]
    addrs = [f["address"] for f in by_addr]
    assert addrs == sorted(addrs) and len(addrs) == 54
    by_blocks = (await client.get(url, params={"limit": 100, "sort": "blocks"})).json()["items"]
    counts = [f["block_count"] for f in by_blocks]
    assert counts == sorted(counts, reverse=True)
    beyond = (await client.get(url, params={"limit": 10, "offset": 1000})).json()
    assert beyond == {"total": 54, "items": []}
    bad = await client.get(url, params={"sort": "size"})
    assert bad.status_code == 422
    bad = await client.get(url, params={"limit": 100001})
    assert bad.status_code == 422


async def test_module_filter(client, host):
    r = await client.get(f"/api/v1/hosts/{host.host_id}/functions", params={"module": "hotmod"})
    body = r.json()
    assert body["total"] == 4
    assert {f["module"] for f in body["items"]} == {"hotmod"}
    assert body["items"][0]["address"] == MODULE_BASE
    r = await client.get(f"/api/v1/hosts/{host.host_id}/functions", params={"module": "nosuch"})
    assert r.json()["total"] == 0


async def test_function_detail_blocks_successors_callees(client, host):
    f = await _fid(client, host.host_id, "vfs_read")
    ksys = await _fid(client, host.host_id, "ksys_read")
    sys_read = await _fid(client, host.host_id, "__x64_sys_read")
    r = await client.get(f"/api/v1/hosts/{host.host_id}/functions/{f['id']}")
    assert r.status_code == 200
    d = r.json()
    assert d["function"]["name"] == "vfs_read"
    assert [b["offset"] for b in d["blocks"]] == [0, 0x10, 0x20]
    b0 = d["blocks"][0]
    assert b0["address"] == f["address"] and b0["address_hex"] == f["address_hex"]
    assert [(s["kind"], s["target_offset"]) for s in b0["successors"]] == [("fallthrough", 0x10), ("taken", 0x20)]
    assert b0["successors"][1]["target_address"] == f["address"] + 0x20
    tail = d["blocks"][2]["successors"][0]
    assert tail["kind"] == "tail_call" and tail["target_name"] == "ksys_read"
    assert tail["target_function_id"] == ksys["id"] and tail["target_address"] == ksys["address"]
    assert tail["target_address_hex"] == ksys["address_hex"]
    assert d["callees"] == [
        {
            "site_offset": 8,
            "target_address": sys_read["address"],
            "target_address_hex": sys_read["address_hex"],
            "name": "__x64_sys_read",
            "module": "vmlinux",
            "function_id": sys_read["id"],
        }
    ]
    assert d["indirect_call_sites"] == [0xC]
    other = await _fid(client, host.host_id, "fn_00010")
    ret = (await client.get(f"/api/v1/hosts/{host.host_id}/functions/{other['id']}")).json()["blocks"][2]
    assert ret["successors"] == [
        {
            "kind": "return",
            "target_offset": None,
            "target_address": None,
            "target_address_hex": None,
            "target_name": None,
            "target_function_id": None,
        }
    ]


async def test_unknown_function_and_host_are_404(client, host):
    r = await client.get(f"/api/v1/hosts/{host.host_id}/functions/999999999")
    assert r.status_code == 404 and r.json() == {"detail": "Function not found"}
    r = await client.get("/api/v1/hosts/no-such-host/functions/1")
    assert r.status_code == 404 and r.json() == {"detail": "Host not found"}
    r = await client.get("/api/v1/hosts/no-such-host")
    assert r.status_code == 404 and r.json() == {"detail": "Host not found"}
    r = await client.get(f"/api/v1/hosts/{host.host_id}/functions/not-a-number")
    assert r.status_code == 422


async def test_function_of_another_hosts_catalog_is_404(backend, client, host, unique):
    other = await backend.agent(f"other-{unique}", kernel_tag=f"other-{unique}")
    await other.connect()
    await wait_catalog_complete(client, f"other-{unique}")
    theirs = await _fid(client, f"other-{unique}", "vfs_read")
    r = await client.get(f"/api/v1/hosts/{host.host_id}/functions/{theirs['id']}")
    assert r.status_code == 404
    await other.close()


async def test_metric_batches_rank_top_functions_and_hotness(client, host):
    now = time.time_ns() // 1_000_000_000 * 1_000_000_000
    # Three 1-s intervals: vfs_read 30+30+30, ksys_read 10+10+10 (two blocks), mod_fn_1 5 only in the
    # oldest interval, plus user-space samples counted only in the totals.
    await host.send_metrics(
        now - 2_000_000_000,
        [("vmlinux", 0, 0, 20), ("vmlinux", 0, 0x10, 10), ("vmlinux", 1, 0, 10), ("hotmod", 1, 0, 5)],
        user=5,
    )
    await host.send_metrics(now - 1_000_000_000, [("vmlinux", 0, 0, 30), ("vmlinux", 1, 0x20, 10)], user=5)
    await host.send_metrics(now, [("vmlinux", 0, 0x20, 30), ("vmlinux", 1, 0, 10)], user=5)
    url = f"/api/v1/hosts/{host.host_id}"

    async def top3():
        t = (await client.get(f"{url}/top-functions", params={"window_s": 3})).json()
        return t if t["total_samples"] == 140 else None

    top = await wait_until(top3)
    assert [(i["name"], i["samples"]) for i in top["items"]] == [("vfs_read", 90), ("ksys_read", 30), ("mod_fn_1", 5)]
    assert top["items"][0]["samples_per_sec"] == 30.0
    assert top["items"][0]["share"] == pytest.approx(90 / 140)
    assert top["items"][2]["module"] == "hotmod"

    # A 2-s window ends at the newest interval and leaves the oldest out.
    top2 = (await client.get(f"{url}/top-functions", params={"window_s": 2, "limit": 1})).json()
    assert [(i["name"], i["samples"]) for i in top2["items"]] == [("vfs_read", 60)]
    assert top2["total_samples"] == 45 + 45

    hot = (await client.get(f"{url}/hotness", params={"window_s": 3})).json()
    vfs = await _fid(client, host.host_id, "vfs_read")
    assert hot["items"][0] == {"function_id": vfs["id"], "samples_per_sec": 30.0}
    assert len(hot["items"]) == 3

    listed = (await client.get(f"{url}/functions", params={"sort": "hotness", "window_s": 3, "limit": 3})).json()
    assert [f["name"] for f in listed["items"]] == ["vfs_read", "ksys_read", "mod_fn_1"]
    assert listed["items"][1]["samples_per_sec"] == 10.0

    per_block = (await client.get(f"{url}/functions/{vfs['id']}/samples", params={"window_s": 3})).json()
    assert per_block["total"] == 90
    assert [(b["offset"], b["samples"]) for b in per_block["blocks"]] == [(0, 50), (0x10, 10), (0x20, 30)]
    detail = (await client.get(f"{url}/functions/{vfs['id']}", params={"window_s": 3})).json()
    assert detail["function"]["samples_per_sec"] == 30.0


async def test_instructions_via_live_command_then_cached(backend, client, host):
    f = await _fid(client, host.host_id, "ksys_read")
    url = f"/api/v1/hosts/{host.host_id}/functions/{f['id']}/instructions"
    r = await client.get(url)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["cached"] is False and body["address_hex"] == f["address_hex"]
    assert [i["text"] for i in body["instructions"]] == ["endbr64", "push rbp", "mov eax, 0x1", "ret"]
    assert body["instructions"][0]["bytes"] == "f30f1efa"
    assert body["instructions"][1]["address"] == f["address"] + 4
    assert body["instructions"][1]["address_hex"] == format(f["address"] + 4, "x")
    assert len(host.commands) == 1
    cmd = host.commands[0]
    vmlinux_digest = next(d for n, _b, _f, d in host.modules if n == "vmlinux")
    assert cmd.inspect_function.digest == vmlinux_digest and cmd.inspect_function.function_index == 1
    assert cmd.inspect_function.target == "kernel"
    again = await client.get(url)
    assert again.status_code == 200 and again.json()["cached"] is True
    assert again.json()["instructions"] == body["instructions"]
    assert len(host.commands) == 1  # served from the cache, the agent was not asked again


async def test_instructions_agent_error_is_502_and_timeout_is_504(client, host):
    url = f"/api/v1/hosts/{host.host_id}/functions/{(await _fid(client, host.host_id, 'fn_00020'))['id']}/instructions"
    host.answer_mode = "error"
    r = await client.get(url)
    assert r.status_code == 502 and "function not in the model" in r.json()["detail"]
    host.answer_mode = "silent"
    r = await client.get(url)
    assert r.status_code == 504


async def test_instructions_of_offline_host_uncached_is_503(backend, client, unique):
    host_id = f"off-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"off-{unique}")
    await agent.connect()
    await wait_catalog_complete(client, host_id)
    await agent.close()

    async def offline():
        return not (await client.get(f"/api/v1/hosts/{host_id}")).json()["online"]

    await wait_until(offline)
    f = await _fid(client, host_id, "fn_00030")
    r = await client.get(f"/api/v1/hosts/{host_id}/functions/{f['id']}/instructions")
    assert r.status_code == 503 and r.json() == {"detail": "Host is offline"}


async def test_instructions_mark_where_a_running_measurement_probes_and_stop_marking_when_it_stops(
    backend, client, unique
):
    """A probe is live state, never part of the cached listing: the markers come and go with the
    measurement, the instructions stay the program's own."""
    from tests.grpc.test_commands import _measure, _online, _until_state

    host_id = f"prb-{unique}"
    agent = await _online(backend, client, host_id)
    vmlinux = next(d for n, _b, _f, d in agent.modules if n == "vmlinux")
    f = await _fid(client, host_id, "vfs_read")
    url = f"/api/v1/hosts/{host_id}/functions/{f['id']}/instructions"
    before = (await client.get(url)).json()
    assert before["probes"] == [] and not any(i["probe"] for i in before["instructions"])
    mid = await _measure(client, host_id, agent, [{"digest": vmlinux, "function_index": 0, "blocks": True}])
    during = (await client.get(url)).json()
    # The scripted agent counts the function and its blocks 0, 0x10, 0x20 with uprobes.
    assert during["probes"] == [0, 0x10, 0x20] and during["cached"] is True
    assert [i["offset"] for i in during["instructions"] if i["probe"]] == [0]
    assert [i["bytes"] for i in during["instructions"]] == [i["bytes"] for i in before["instructions"]]
    # Another target's measurement does not mark the kernel's listing.
    other = await client.get(url, params={"target": "p4242-1000"})
    assert other.status_code == 404 or other.json()["probes"] == []
    r = await client.post(f"/api/v1/hosts/{host_id}/measurements/{mid}/stop")
    assert r.status_code == 202
    await _until_state(client, host_id, r.json()["id"], "done")
    seq = await agent.send_measurement(
        mid,
        time.time_ns() // 10**9 * 10**9,
        [(0, 1, 1e3)],
        state=pb.MEASUREMENT_STATE_STOPPED,
        detail="stopped on request",
    )
    await wait_for_ack(agent, seq)
    after = (await client.get(url)).json()
    assert after["probes"] == [] and not any(i["probe"] for i in after["instructions"])
    await agent.close()
