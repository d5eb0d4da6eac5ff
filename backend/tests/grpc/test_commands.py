# SPDX-License-Identifier: Apache-2.0
"""Commands and measurements through the real backend with a fake agent on the real stream: a command
goes queued → sent → running (with the agent's progress) → done, audited with who asked; its id is an
idempotency key; cancel drops a queued command and asks the agent to stop a running one; commands
for an offline host wait and fail after the queue timeout; attach records a target and fetches its
process's catalog (digest verified with the module's build id); a measurement's rows and values are
stored and served, malformed measurement data ends the stream and stores nothing, and 10,000
resources in one request are served without a hang."""

import asyncio
import hashlib
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from app.protocol.proto import pb
from tests.conftest import make_user, token_for
from tests.scripted_agent import HANG_S, PROCESS_BUILD_ID, wait_catalog_complete, wait_for_ack, wait_until


async def _online(backend, client, host_id, **kwargs):
    agent = await backend.agent(host_id, kernel_tag=f"k-{host_id}", **kwargs)
    await agent.connect()

    await wait_catalog_complete(client, host_id)
    return agent


async def _command(client, host_id, cid):
    r = await client.get(f"/api/v1/hosts/{host_id}/commands/{cid}")
    assert r.status_code == 200, r.text
    return r.json()


async def _until_state(client, host_id, cid, *states, timeout=HANG_S):
    async def reached():
        c = await _command(client, host_id, cid)
        return c if c["state"] in states else None

    return await wait_until(reached, timeout)


async def test_attach_goes_queued_sent_running_done_with_progress_and_audit(backend, client, unique):
    host_id = f"cmd-{unique}"
    # A process module of its own (its build id from this test's unique value): the backend has not stored
    # its catalog piece, whatever ran before, so it must ask this agent for it.
    build_id = hashlib.sha1(unique.encode()).hexdigest()
    agent = await _online(backend, client, host_id, process_build_id=build_id)
    agent.hold = asyncio.Event()
    r = await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 4242})
    assert r.status_code == 202, r.text
    cid = r.json()["id"]
    assert r.json()["state"] in ("queued", "sent") and r.json()["created_by"] == "admin"
    running = await _until_state(client, host_id, cid, "running")
    assert running["progress"] == 0.5 and running["message"] == "halfway" and running["sent_at"]
    agent.hold.set()
    done = await _until_state(client, host_id, cid, "done")
    assert done["progress"] == 1 and done["finished_at"] and done["error"] is None
    assert done["result"]["targets"] == [
        {"id": "p4242-1000", "pid": 4242, "command": "fake-server", "state": "attached"}
    ]
    targets = (await client.get(f"/api/v1/hosts/{host_id}/targets")).json()
    assert [t["id"] for t in targets] == ["kernel", "p4242-1000"]
    assert targets[1]["state"] == "attached" and targets[1]["module_count"] == 1
    # The process's catalog piece was asked for and verified with the module's own build id.
    name, _base, _fns, digest = agent.process

    async def stored():
        mods = (await client.get(f"/api/v1/hosts/{host_id}/modules", params={"target": "p4242-1000"})).json()
        return mods if mods and mods[0]["complete"] else None

    mods = await wait_until(stored)
    assert mods[0]["name"] == name and mods[0]["digest"] == digest and mods[0]["build_id"] == build_id
    assert build_id != PROCESS_BUILD_ID and digest in agent.sent_catalogs
    page = (
        await client.get(f"/api/v1/hosts/{host_id}/functions", params={"target": "p4242-1000", "q": "srv_fn_3"})
    ).json()
    assert page["total"] == 1 and page["items"][0]["address"] == 0x555555554000 + 0x1000 + 0x300
    kernel_page = (await client.get(f"/api/v1/hosts/{host_id}/functions", params={"q": "srv_fn_3"})).json()
    assert kernel_page["total"] == 0, "a process's functions are not the kernel's"
    actions = (await client.get("/api/v1/audit", params={"limit": 500})).json()
    mine = [a for a in actions if a["detail"].get("command_id") == cid]
    assert {a["action"] for a in mine} >= {"command_requested", "command_sent", "command_finished"}
    assert next(a for a in mine if a["action"] == "command_requested")["actor"] == "admin"
    await agent.close()


async def test_a_command_id_is_an_idempotency_key(backend, client, unique):
    host_id = f"idem-{unique}"
    agent = await _online(backend, client, host_id)
    cid = str(uuid.uuid4())
    first = await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 777, "command_id": cid})
    again = await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 777, "command_id": cid})
    assert first.status_code == 202 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"] == cid
    await _until_state(client, host_id, cid, "done")
    assert sum(1 for c in agent.commands if c.id == cid) == 1, "stored once, sent once"
    r = await client.delete(f"/api/v1/hosts/{host_id}/targets/p777-1000", params={"command_id": cid})
    assert r.status_code == 409, "the same id for another kind of command is refused"
    await agent.close()


async def test_cancel_drops_a_queued_command_and_stops_a_running_one(backend, client, unique):
    host_id = f"cancel-{unique}"
    agent = await _online(backend, client, host_id)
    await agent.close()
    await wait_until(lambda: _offline(client, host_id))
    queued = (await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 11})).json()
    assert queued["state"] == "queued"
    r = await client.post(f"/api/v1/hosts/{host_id}/commands/{queued['id']}/cancel")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    again = await client.post(f"/api/v1/hosts/{host_id}/commands/{queued['id']}/cancel")
    assert again.status_code == 409
    # Back online: the cancelled command is never sent; a new one runs, and is cancelled while it runs.
    agent = await _online(backend, client, host_id)
    agent.hold = asyncio.Event()
    running = (await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 12})).json()
    await _until_state(client, host_id, running["id"], "running")
    r = await client.post(f"/api/v1/hosts/{host_id}/commands/{running['id']}/cancel")
    assert r.status_code == 200 and r.json()["cancel_requested"] is True
    ended = await _until_state(client, host_id, running["id"], "cancelled")
    assert ended["finished_at"] is not None
    assert all(c.id != queued["id"] for c in agent.commands)
    assert any(c.WhichOneof("kind") == "cancel" and c.cancel.command_id == running["id"] for c in agent.commands)
    await agent.close()


async def _offline(client, host_id):
    return not (await client.get(f"/api/v1/hosts/{host_id}")).json()["online"]


async def test_commands_wait_for_an_offline_host_and_fail_after_the_queue_timeout(backend, client, unique):
    host_id = f"later-{unique}"
    agent = await _online(backend, client, host_id)
    await agent.close()
    await wait_until(lambda: _offline(client, host_id))
    waiting = (await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 21})).json()
    stale = (await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 22})).json()
    # The second one is older than the queue timeout (as if an hour passed); the sweep fails it.
    async with backend.runtime.engine.begin() as conn:
        await conn.execute(
            text("UPDATE commands SET created_at = now() - interval '1 hour' WHERE id = :id"),
            {"id": uuid.UUID(stale["id"])},
        )
    await backend.runtime.commands.sweep()
    failed = await _command(client, host_id, stale["id"])
    assert failed["state"] == "failed" and "not connected" in failed["error"]
    agent = await _online(backend, client, host_id)
    done = await _until_state(client, host_id, waiting["id"], "done")
    assert done["result"]["targets"][0]["pid"] == 21
    assert all(c.id != stale["id"] for c in agent.commands)
    await agent.close()


async def test_changing_what_an_agent_does_needs_the_operator_role(backend, client, unique):
    host_id = f"role-{unique}"
    agent = await _online(backend, client, host_id)
    user, password = await make_user(client, "viewer", unique)
    token = await token_for(backend.base_url, user, password)
    headers = {"Authorization": f"Bearer {token}"}
    r = await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 5}, headers=headers)
    assert r.status_code == 403
    r = await client.post(
        f"/api/v1/hosts/{host_id}/measurements",
        headers=headers,
        json={"resources": [{"digest": "0" * 64, "function_index": 0}], "metrics": ["count"]},
    )
    assert r.status_code == 403
    assert (await client.get(f"/api/v1/hosts/{host_id}/targets", headers=headers)).status_code == 200
    await agent.close()


async def _measure(client, host_id, agent, resources, metrics=("count", "wall"), **extra):
    r = await client.post(
        f"/api/v1/hosts/{host_id}/measurements",
        json={"target": "kernel", "resources": resources, "metrics": list(metrics), **extra},
    )
    assert r.status_code == 202, r.text
    cid = r.json()["id"]
    mid = r.json()["params"]["measurement_id"]
    done = await _until_state(client, host_id, cid, "done", "failed")
    assert done["state"] == "done", done
    return mid


async def test_a_measurements_rows_and_values_are_stored_and_served(backend, client, unique):
    host_id = f"meas-{unique}"
    agent = await _online(backend, client, host_id)
    vmlinux = next(d for n, _b, _f, d in agent.modules if n == "vmlinux")
    mid = await _measure(client, host_id, agent, [{"digest": vmlinux, "function_index": 0, "blocks": True}])
    m = (await client.get(f"/api/v1/hosts/{host_id}/measurements/{mid}")).json()
    assert m["state"] == "armed" and m["resource_count"] == 4 and m["created_by"] == "admin"
    assert [(r["kind"], r["block_offset"]) for r in m["resources"]] == [
        ("function", None),
        ("block", 0),
        ("block", 0x10),
        ("block", 0x20),
    ]
    assert m["resources"][0]["function"] == "vfs_read" and m["resources"][0]["function_id"] is not None
    plans = {p["metric"]: p for p in m["resources"][0]["metrics"]}
    assert plans["count"]["label"] == "exact" and plans["wall_ns"]["unit"] == "ns"
    assert m["resources"][1]["function_row"] == 0
    now = time.time_ns() // 10**9 * 10**9
    for i in range(5):
        seq = await agent.send_measurement(
            mid, now - (5 - i) * 10**9, [(0, 100, 5e6), (1, 100, 0), (2, 40, 0), (3, 100, 0)]
        )
    await wait_for_ack(agent, seq)
    values = (await client.get(f"/api/v1/hosts/{host_id}/measurements/{mid}/values", params={"window_s": 60})).json()
    sums = {v["resource"]: v["values"] for v in values["resources"]}
    assert sums[0]["count"] == 500 and sums[0]["wall_ns"] == 25e6 and sums[0]["exits"] == 500
    assert sums[2]["count"] == 200 and sums[2]["wall_ns"] is None
    assert values["intervals"] == 5 and values["measured_seconds"] == pytest.approx(5.0)
    assert values["latest"]["resources"][0]["values"]["count"] == 100
    series = (
        await client.get(
            f"/api/v1/hosts/{host_id}/measurements/{mid}/series",
            params={"resources": "0,2", "window_s": 60, "points": 60},
        )
    ).json()
    assert series["step_s"] == 1 and len(series["buckets"]) == 5
    assert [p["values"]["count"] for p in series["series"][1]["points"]] == [40] * 5
    state = (await client.get(f"/api/v1/hosts/{host_id}/measurements/{mid}")).json()["state"]
    assert state == "running"
    # Stop: the agent's last interval says so, and the state is final.
    r = await client.post(f"/api/v1/hosts/{host_id}/measurements/{mid}/stop")
    assert r.status_code == 202
    await _until_state(client, host_id, r.json()["id"], "done")
    seq = await agent.send_measurement(
        mid, now, [(0, 1, 1e3)], state=pb.MEASUREMENT_STATE_STOPPED, detail="stopped on request"
    )
    await wait_for_ack(agent, seq)
    m = (await client.get(f"/api/v1/hosts/{host_id}/measurements/{mid}")).json()
    assert m["state"] == "stopped" and m["ended_at"] is not None
    assert (await client.post(f"/api/v1/hosts/{host_id}/measurements/{mid}/stop")).status_code == 409
    await agent.close()


async def test_a_stop_s_result_is_applied_after_the_last_interval_sent_before_it_is_stored(
    backend, client, unique, monkeypatch
):
    """The agent sends a measurement's last interval, then the stop's result. The ingest writer stores data
    asynchronously (here: slowed to 1.5 s a commit, as on a loaded machine), so the result waits for it: the
    moment the stop's command reads done, the window's last interval is already served (a before/after read
    then has every interval; the kernel lane once read a window as 0 seconds)."""
    host_id = f"stop-order-{unique}"
    agent = await _online(backend, client, host_id)
    vmlinux = next(d for n, _b, _f, d in agent.modules if n == "vmlinux")
    mid = await _measure(client, host_id, agent, [{"digest": vmlinux, "function_index": 0}])
    writer = backend.runtime.writer
    commit = writer._commit

    async def slow_commit(items):
        await asyncio.sleep(1.5)
        await commit(items)

    monkeypatch.setattr(writer, "_commit", slow_commit)
    agent.answer_mode = "silent"
    r = await client.post(f"/api/v1/hosts/{host_id}/measurements/{mid}/stop")
    assert r.status_code == 202, r.text
    cid = r.json()["id"]
    await wait_until(lambda: _sent(agent, cid))
    now = time.time_ns() // 10**9 * 10**9
    await agent.send_measurement(
        mid, now - 10**9, [(0, 7, 0)], state=pb.MEASUREMENT_STATE_STOPPED, detail="stopped on request"
    )
    info = agent.measurements[mid]
    info.state = pb.MEASUREMENT_STATE_STOPPED
    await agent.write(pb.AgentMessage(result=pb.CommandResult(command_id=cid, ok=True, measurement=info)))
    await _until_state(client, host_id, cid, "done")
    values = (await client.get(f"/api/v1/hosts/{host_id}/measurements/{mid}/values", params={"window_s": 60})).json()
    counts = {v["resource"]: v["values"].get("count") for v in values["resources"]}
    assert counts.get(0) == 7 and values["intervals"] == 1, f"the stop is done, the last interval not served: {values}"
    await agent.close()


async def test_a_result_that_is_no_measurement_s_does_not_wait_for_the_data_before_it(
    backend, client, unique, monkeypatch
):
    """Only a measurement's result waits for the data sent before it to be stored. An attach's answer
    arriving behind a data batch the writer has not stored (here: held until the end of the test) is
    applied at once; before, it waited for the batch, so a backlog stalled every command of the host."""
    host_id = f"no-wait-{unique}"
    agent = await _online(backend, client, host_id)
    vmlinux = next(d for n, _b, _f, d in agent.modules if n == "vmlinux")
    mid = await _measure(client, host_id, agent, [{"digest": vmlinux, "function_index": 0}])
    writer = backend.runtime.writer
    commit = writer._commit
    release = asyncio.Event()

    async def held_commit(items):
        await release.wait()
        await commit(items)

    monkeypatch.setattr(writer, "_commit", held_commit)
    try:
        agent.answer_mode = "silent"
        r = await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 77})
        assert r.status_code == 202, r.text
        cid = r.json()["id"]
        await wait_until(lambda: _sent(agent, cid))
        await agent.send_measurement(mid, time.time_ns() // 10**9 * 10**9 - 10**9, [(0, 7, 0)])
        t = agent.target_for(77)
        await agent.write(
            pb.AgentMessage(result=pb.CommandResult(command_id=cid, ok=True, targets=pb.TargetsUpdate(targets=[t])))
        )
        done = await _until_state(client, host_id, cid, "done", "failed")
        assert done["state"] == "done", done
        values = (
            await client.get(f"/api/v1/hosts/{host_id}/measurements/{mid}/values", params={"window_s": 60})
        ).json()
        assert values["intervals"] == 0, "the batch was stored: the writer was not holding it"
    finally:
        release.set()
    await agent.close()


async def _sent(agent, cid):
    return any(c.id == cid for c in agent.commands)


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda b: b.resources[0].__setattr__("resource", 99), "does not exist"),
        (lambda b: b.resources[0].values[0].__setattr__("unit", 7), "unit or mechanism"),
        (lambda b: b.resources[0].values[0].__setattr__("value", float("nan")), "out of range"),
        (lambda b: b.resources[0].values[0].__setattr__("metric", 99), "unknown metric"),
        (lambda b: b.__setattr__("interval_end_unix_ns", b.interval_start_unix_ns), "empty"),
        (lambda b: b.units.append("x\x01"), "control character"),
    ],
)
async def test_malformed_measurement_data_is_refused_alone_and_stores_nothing(backend, client, unique, mutate, reason):
    host_id = f"badm-{unique}"
    agent = await _online(backend, client, host_id)
    vmlinux = next(d for n, _b, _f, d in agent.modules if n == "vmlinux")
    mid = await _measure(client, host_id, agent, [{"digest": vmlinux, "function_index": 1}])
    batch = pb.MeasurementBatch(
        measurement_id=mid,
        interval_start_unix_ns=time.time_ns() - 10**9,
        interval_end_unix_ns=time.time_ns(),
        state=pb.MEASUREMENT_STATE_RUNNING,
        units=["calls"],
        mechanisms=["uprobe_multi"],
        resources=[
            pb.ResourceValues(
                resource=0,
                values=[pb.MetricValue(metric=pb.METRIC_COUNT, value=3, total=3, label=pb.VALUE_LABEL_EXACT)],
            )
        ],
    )
    mutate(batch)
    await agent.write(pb.AgentMessage(seq=1, measurement=batch))
    # Refused alone: acknowledged (never resent), recorded with the reason, the stream goes on.
    await wait_for_ack(agent, 1)
    assert not agent._reader.done()
    assert reason in await backend.scalar("SELECT refusal FROM measurements WHERE id = :m", m=mid)
    assert await backend.scalar("SELECT count(*) FROM measurement_points WHERE measurement_id = :m", m=mid) == 0
    await agent.close()


async def test_values_of_a_measurement_the_host_does_not_run_are_refused_and_recorded(backend, client, unique):
    host_id = f"unk-{unique}"
    agent = await _online(backend, client, host_id)
    seq = await agent.send_measurement("not-ours", time.time_ns() - 10**9, [(0, 1, 0)])
    await wait_for_ack(agent, seq)
    assert await backend.scalar("SELECT count(*) FROM measurement_points WHERE measurement_id = 'not-ours'") == 0
    reasons = await backend.scalar("SELECT string_agg(reason, '|') FROM data_gaps WHERE host_id = :h", h=host_id)
    assert "which this host does not run" in reasons
    await agent.close()


async def test_ten_thousand_resources_in_one_request_are_served_and_more_are_refused(backend, client, unique):
    host_id = f"tenk-{unique}"
    agent = await _online(backend, client, host_id)
    vmlinux = next(d for n, _b, _f, d in agent.modules if n == "vmlinux")
    resources = [
        {"module": 0, "function_index": i % 50, "kind": "block", "offset": (i // 50) * 0x10 % 0x30}
        for i in range(10_000)
    ]
    t0 = time.monotonic()
    r = await client.post(
        f"/api/v1/hosts/{host_id}/measurements",
        json={"modules": [vmlinux], "resources": resources, "metrics": ["count"]},
    )
    assert r.status_code == 202, r.text[:300]

    async def delivered():
        return next((c for c in agent.commands if c.WhichOneof("kind") == "start_measurement"), None)

    cmd = await wait_until(delivered, 30)
    assert len(cmd.start_measurement.resources) == 10_000 and time.monotonic() - t0 < 30
    assert {x.digest for x in cmd.start_measurement.resources} == {vmlinux}
    done = await _until_state(client, host_id, r.json()["id"], "done", "failed", timeout=HANG_S)
    assert done["result"]["resources"] == 10_000
    too_many = await client.post(
        f"/api/v1/hosts/{host_id}/measurements",
        json={"modules": [vmlinux], "resources": resources + resources[:1], "metrics": ["count"]},
    )
    assert too_many.status_code == 413 and "at most 10000" in too_many.json()["detail"]
    await agent.close()


async def test_reconnect_restores_targets_and_measurements_from_hello(backend, client, unique):
    """After a reconnect Hello says what runs: reported measurements keep their state, one the agent no
    longer lists has failed with the reason, and sent commands are sent again (answered once)."""
    host_id = f"hello-{unique}"
    agent = await _online(backend, client, host_id)
    vmlinux = next(d for n, _b, _f, d in agent.modules if n == "vmlinux")
    kept = await _measure(client, host_id, agent, [{"digest": vmlinux, "function_index": 2}])
    lost = await _measure(client, host_id, agent, [{"digest": vmlinux, "function_index": 3}])
    agent.hold = asyncio.Event()
    pending = (await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 31})).json()
    await _until_state(client, host_id, pending["id"], "running")
    await agent.close()
    again = await backend.agent(host_id, kernel_tag=f"k-{host_id}")
    again.modules = agent.modules
    again.measurements = {kept: agent.measurements[kept]}
    again.measurements[kept].state = pb.MEASUREMENT_STATE_RUNNING
    await again.connect()
    done = await _until_state(client, host_id, pending["id"], "done")
    assert done["result"]["targets"][0]["pid"] == 31
    assert sum(1 for c in again.commands if c.id == pending["id"]) == 1
    assert (await client.get(f"/api/v1/hosts/{host_id}/measurements/{kept}")).json()["state"] == "running"
    gone = (await client.get(f"/api/v1/hosts/{host_id}/measurements/{lost}")).json()
    assert gone["state"] == "failed" and "no longer runs it" in gone["detail"]
    await again.close()


async def test_partial_timestamps_are_refused_like_metric_batches(backend, client, unique):
    """Measurement intervals far ahead of the backend's clock are refused, recorded, and a run of them flags
    the host."""
    from app.agents.clock import CLOCK_AHEAD_RUN

    host_id = f"skew-{unique}"
    agent = await _online(backend, client, host_id)
    vmlinux = next(d for n, _b, _f, d in agent.modules if n == "vmlinux")
    mid = await _measure(client, host_id, agent, [{"digest": vmlinux, "function_index": 4}])
    ahead = int((datetime.now(UTC) + timedelta(hours=2)).timestamp() * 1e9)
    for k in range(CLOCK_AHEAD_RUN):
        seq = await agent.send_measurement(mid, ahead + k * 10**9, [(0, 5, 0)])
    await wait_for_ack(agent, seq)
    assert await backend.scalar("SELECT count(*) FROM measurement_points WHERE measurement_id = :m", m=mid) == 0
    host = (await client.get(f"/api/v1/hosts/{host_id}")).json()
    assert host["refused_batches"] >= CLOCK_AHEAD_RUN and host["clock_skewed"]
    await agent.close()
