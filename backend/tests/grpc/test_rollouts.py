# SPDX-License-Identifier: Apache-2.0
"""Staged roll-outs of an approved plan with the guard on every host (issue 19), through the real backend
and Postgres with fake agents (tests.scripted_agent: scripted agents, one per host, each with its own
process of the same build at its own pid; they answer InstallPlan only with the approved code hash and
ComparePlan from scripted per-window counts).

Proven here: a roll-out goes wave by wave (the canary answers before the next wave starts), each host
gets a per-host plan that inherits the approval (same code hash and build id, its own target) and a host
of another build never receives a command; a regression on one host is reverted by the guard and halts
the roll-out, later waves untouched; a host that goes away mid-wave is skipped with the reason after the
wait; pause, resume and revert everywhere; the roll-outs' runner stopped and started again (as a
backend restart does) resumes from the rows; and the REST surface refuses viewers, plans that are not
approved as they are, hosts of another build, conflicting roll-outs and malformed labels, changing
nothing."""

import asyncio

import pytest

from tests.api.routes.test_fleet import _raw_post
from tests.conftest import make_user, token_for
from tests.grpc.test_plans import _client_as, _plan, _until
from tests.scripted_agent import COMPARE_SLOWER, PROCESS_BUILD_ID, wait_until

GUARD = {"window_s": 1, "guard_pairs": 3, "guard_window_seconds": 0.2}


async def _host(backend, client, host_id, tag, pid, build=PROCESS_BUILD_ID):
    """A scripted agent for the host, labelled with the test's tag, attached to its process (pid)."""
    agent = await backend.agent(host_id, kernel_tag=f"k-{host_id}", labels={"rollout": tag}, process_build_id=build)
    await agent.connect()
    r = await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": pid})
    assert r.status_code == 202, r.text

    async def ready():
        mods = (await client.get(f"/api/v1/hosts/{host_id}/modules", params={"target": f"p{pid}-1000"})).json()
        return bool(mods) and mods[0]["complete"]

    await wait_until(ready)
    return agent


async def _fleet(backend, client, unique, n, others=0):
    """n hosts of one process build and `others` of another, all labelled rollout=<unique>; an approver's
    client; the plan made on the first host, requested by admin and approved by the approver."""
    agents = [await _host(backend, client, f"ro{i}-{unique}", unique, 5000 + i) for i in range(n)]
    agents += [
        await _host(backend, client, f"rox{i}-{unique}", unique, 6000 + i, build="cd" * 20) for i in range(others)
    ]
    approver = _client_as(backend, await token_for(backend.base_url, *await make_user(client, "approver", unique)))
    host0 = agents[0].host_id
    base = f"/api/v1/hosts/{host0}/plans"
    r = await client.post(
        base, json={"target": "p5000-1000", "digest": agents[0].process[3], "function_index": 2, "seconds": 1}
    )
    assert r.status_code == 202, r.text
    plan_id = r.json()["id"]
    await _until(client, host0, plan_id, "ready")
    assert (await client.post(f"{base}/{plan_id}/request")).status_code == 200
    async with approver:
        assert (await approver.post(f"{base}/{plan_id}/approve")).status_code == 200, "approved"
    return agents, plan_id


def _sent(agent, kind):
    return [c for c in agent.commands if c.WhichOneof("kind") == kind]


async def _rollout(client, rid):
    r = await client.get(f"/api/v1/rollouts/{rid}")
    assert r.status_code == 200, r.text
    return r.json()


async def _until_state(client, rid, *states):
    async def reached():
        ro = await _rollout(client, rid)
        return ro if ro["state"] in states else None

    return await wait_until(reached, 120)


async def _close(agents):
    for a in agents:
        await a.close()


async def test_a_rollout_goes_wave_by_wave_with_per_host_plans_and_never_touches_another_build(backend, client, unique):
    agents, plan_id = await _fleet(backend, client, unique, 4, others=1)
    host0 = agents[0].host_id
    r = await client.post(
        "/api/v1/rollouts",
        json={"host_id": host0, "plan_id": plan_id, "labels": {"rollout": unique}, "wave_sizes": [1, 2], **GUARD},
    )
    assert r.status_code == 201, r.text
    ro = r.json()
    assert ro["wave_sizes"] == [1, 2, 1] and ro["kind"] == "process" and ro["build_id"] == PROCESS_BUILD_ID
    assert [h["host_id"] for h in ro["hosts"]] == [a.host_id for a in agents[:4]], "the plan's own host is the canary"
    assert [h["wave"] for h in ro["hosts"]] == [0, 1, 1, 2]
    ro = await _until_state(client, ro["id"], "completed", "halted")
    assert ro["state"] == "completed", ro
    assert [h["state"] for h in ro["hosts"]] == ["installed"] * 4
    assert all(h["guard"]["verdict"] == "within_noise" and h["guard"]["action"] == "kept" for h in ro["hosts"])
    assert ro["waves"] == [
        {"wave": 0, "size": 1, "states": {"installed": 1}},
        {"wave": 1, "size": 2, "states": {"installed": 2}},
        {"wave": 2, "size": 1, "states": {"installed": 1}},
    ]
    # The canary is the approved plan itself; every other host got its own plan inheriting the approval.
    assert ro["hosts"][0]["plan_id"] == plan_id
    src = await _plan(client, host0, plan_id)
    for i, h in enumerate(ro["hosts"][1:], start=1):
        p = await _plan(client, h["host_id"], h["plan_id"])
        assert p["derived_from"] == plan_id and p["rollout_id"] == ro["id"] and p["state"] == "installed"
        assert (p["approved_code_sha256"], p["approved_build_id"]) == (src["code_sha256"], src["build_id"])
        assert p["approved_by"] == src["approved_by"] and p["target_id"] == f"p{5000 + i}-1000"
        installs = _sent(agents[i], "install_plan")
        assert len(installs) == 1 and installs[0].install_plan.plan_id == h["plan_id"]
        assert installs[0].install_plan.approved_code_sha256 == src["code_sha256"]
        body = (await client.get(f"/api/v1/hosts/{h['host_id']}/plans/{h['plan_id']}/body")).json()
        assert (body["target"]["pid"], body["target"]["start_time"]) == (5000 + i, 1000), "its own process"
        trail = (await client.get(f"/api/v1/hosts/{h['host_id']}/plans/{h['plan_id']}/audit")).json()
        derived = next(a for a in trail if a["action"] == "plan_derived")
        assert derived["detail"]["derived_from"] == plan_id and derived["detail"]["rollout_id"] == ro["id"]
    # The host of another build (labelled alike) received nothing but its attach.
    assert [c.WhichOneof("kind") for c in agents[4].commands] == ["attach_target"]
    # Wave by wave: no host of a wave was started before every host of the wave before had answered.
    trail = (await client.get(f"/api/v1/rollouts/{ro['id']}/audit")).json()
    events = [(a["action"], a["detail"].get("wave")) for a in trail if a["action"].startswith("rollout_host_")]
    for wave in (1, 2):
        first_start = min(i for i, e in enumerate(events) if e == ("rollout_host_installing", wave))
        last_before = max(i for i, e in enumerate(events) if e == ("rollout_host_installed", wave - 1))
        assert last_before < first_start, events
    assert trail[0]["action"] == "rollout_start" and trail[-1]["action"] == "rollout_complete"
    # Revert everywhere: every host's plan reverted, the roll-out reverted, audited.
    r = await client.post(f"/api/v1/rollouts/{ro['id']}/revert")
    assert r.status_code == 200 and r.json()["state"] == "reverting", r.text
    ro = await _until_state(client, ro["id"], "reverted")
    assert [h["state"] for h in ro["hosts"]] == ["reverted"] * 4
    assert all(a.installed == {} for a in agents)
    trail = (await client.get(f"/api/v1/rollouts/{ro['id']}/audit")).json()
    assert ("rollout_revert", "admin") in [(a["action"], a["actor"]) for a in trail]
    assert trail[-1]["action"] == "rollout_reverted"
    await _close(agents)


async def test_a_regression_on_one_host_is_reverted_by_the_guard_and_halts_the_rollout(backend, client, unique):
    agents, plan_id = await _fleet(backend, client, unique, 4)
    agents[1].compare_in_plan = list(COMPARE_SLOWER)  # host 1 (wave 1) reports slower calls
    r = await client.post(
        "/api/v1/rollouts",
        json={"host_id": agents[0].host_id, "plan_id": plan_id, "labels": {"rollout": unique}, **GUARD},
    )
    assert r.status_code == 201, r.text
    assert r.json()["wave_sizes"] == [1, 2, 1], "the default doubles from the canary"
    ro = await _until_state(client, r.json()["id"], "halted", "completed")
    assert ro["state"] == "halted"
    bad = ro["hosts"][1]

    async def settled():
        x = await _rollout(client, ro["id"])
        return x if all(h["state"] not in ("installing", "comparing") for h in x["hosts"]) else None

    ro = await wait_until(settled)
    states = [h["state"] for h in ro["hosts"]]
    assert states == ["installed", "reverted", "installed", "pending"], states
    bad = ro["hosts"][1]
    assert bad["reason"].startswith("guard: the plan's code took +10.5% of the samples") and "reverted" in bad["reason"]
    assert bad["guard"]["verdict"] == "slower" and bad["guard"]["change"] > 0
    # The interval's confidence comes with it (the console says "95% interval").
    assert bad["guard"]["confidence"] == 0.95 and bad["guard"]["interval"][0] > 0
    assert ro["reason"].startswith(f"{agents[1].host_id}: guard:"), ro["reason"]
    assert agents[1].installed == {} and await _until(client, bad["host_id"], bad["plan_id"], "reverted")
    # The later wave is untouched: its one attach command and nothing else (the same command twice when its
    # stream reconnected on a loaded machine: a command sent is sent again after a reconnect).
    sent = {(c.id, c.WhichOneof("kind")) for c in agents[3].commands}
    assert len(sent) == 1 and next(iter(sent))[1] == "attach_target", f"the later wave is untouched: {sent}"
    trail = (await client.get(f"/api/v1/rollouts/{ro['id']}/audit")).json()
    halt = next(a for a in trail if a["action"] == "rollout_halt")
    assert halt["actor"] == "system" and halt["detail"]["reason"] == ro["reason"]
    assert (await client.post(f"/api/v1/rollouts/{ro['id']}/resume")).status_code == 409, "halted: not resumed"
    assert (await client.post(f"/api/v1/rollouts/{ro['id']}/revert")).status_code == 200
    ro = await _until_state(client, ro["id"], "reverted")
    assert [h["state"] for h in ro["hosts"]] == ["reverted", "reverted", "reverted", "skipped"]
    assert all(a.installed == {} for a in agents)
    await _close(agents)


async def test_a_host_that_goes_offline_mid_wave_is_skipped_with_the_reason(backend, client, unique):
    agents, plan_id = await _fleet(backend, client, unique, 3)
    agents[1].hold = asyncio.Event()  # host 1 holds its first command (the window before) ...
    r = await client.post(
        "/api/v1/rollouts",
        json={
            "host_id": agents[0].host_id,
            "plan_id": plan_id,
            "labels": {"rollout": unique},
            "offline_wait_s": 1,
            **GUARD,
        },
    )
    rid = r.json()["id"]

    async def holding():
        return [c for c in agents[1].commands if c.WhichOneof("kind") == "start_measurement"]

    await wait_until(holding)
    await agents[1].close()  # ... and goes away mid-wave
    ro = await _until_state(client, rid, "completed", "halted")
    assert ro["state"] == "completed", ro
    assert [h["state"] for h in ro["hosts"]] == ["installed", "skipped", "installed"]
    assert ro["hosts"][1]["reason"].startswith("the host was offline for ") and "skipped" in ro["hosts"][1]["reason"]
    trail = (await client.get(f"/api/v1/rollouts/{rid}/audit")).json()
    skip = next(a for a in trail if a["action"] == "rollout_host_skipped")
    assert skip["detail"]["host_id"] == agents[1].host_id and skip["detail"]["reason"] == ro["hosts"][1]["reason"]
    await _close([agents[0], agents[2]])


async def test_pause_resume_and_a_restarted_runner_resume_from_the_rows(backend, client, unique):
    agents, plan_id = await _fleet(backend, client, unique, 3)
    agents[0].hold = asyncio.Event()  # the canary holds its window before
    r = await client.post(
        "/api/v1/rollouts",
        json={"host_id": agents[0].host_id, "plan_id": plan_id, "labels": {"rollout": unique}, **GUARD},
    )
    rid = r.json()["id"]
    await wait_until(lambda: _sent_async(agents[0], "start_measurement"))
    r = await client.post(f"/api/v1/rollouts/{rid}/pause")
    assert r.status_code == 200 and r.json()["state"] == "paused", r.text
    assert (await client.post(f"/api/v1/rollouts/{rid}/pause")).status_code == 409
    agents[0].hold.set()

    async def canary_done():
        ro = await _rollout(client, rid)
        return ro if ro["hosts"][0]["state"] == "installed" else None

    ro = await canary_done() or await wait_until(canary_done)
    assert ro["state"] == "paused" and [h["state"] for h in ro["hosts"][1:]] == ["pending", "pending"]
    assert not _sent(agents[1], "install_plan"), "paused: no host started"
    # The backend's roll-out runner stops (as with a backend stop), the roll-out is resumed meanwhile, and
    # nothing moves until the runner starts again from the rows (as a backend start does).
    rollouts = backend.runtime.rollouts
    await rollouts.stop()
    async with backend.runtime.sessionmaker() as db:
        await rollouts.resume(db, __import__("uuid").UUID(rid), "admin")
        await db.commit()
    assert (await _rollout(client, rid))["state"] == "running"
    assert [h["state"] for h in (await _rollout(client, rid))["hosts"][1:]] == ["pending", "pending"]
    await rollouts.start()
    ro = await _until_state(client, rid, "completed", "halted")
    assert ro["state"] == "completed" and [h["state"] for h in ro["hosts"]] == ["installed"] * 3
    trail = [a["action"] for a in (await client.get(f"/api/v1/rollouts/{rid}/audit")).json()]
    assert "rollout_pause" in trail and "rollout_resume" in trail
    await _close(agents)


async def test_two_replicas_runners_drive_one_rollout_and_start_each_host_once(backend, client, unique):
    """Each replica resumes every roll-out not done at its start (Rollouts.start()), so behind a balancer
    two runners drive one roll-out at once: their turns take the roll-out's row lock, and a host is
    started only while its row is still pending under that lock, so every host gets one plan and one
    install, and the roll-out completes once."""
    from app.domain.rollouts import Rollouts

    agents, plan_id = await _fleet(backend, client, unique, 4)
    rt = backend.runtime
    other = Rollouts(rt.sessionmaker, rt.hub, rt.plans)  # the second replica's runner, on the same database
    other.poll_s = rt.rollouts.poll_s / 3  # out of step with the first
    r = await client.post(
        "/api/v1/rollouts",
        json={"host_id": agents[0].host_id, "plan_id": plan_id, "labels": {"rollout": unique}, **GUARD},
    )
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    await other.start()  # as the second replica's start does: it resumes the roll-out too
    assert rid in other.tasks and rid in rt.rollouts.tasks, "both runners drive it"
    try:
        ro = await _until_state(client, rid, "completed", "halted")
    finally:
        await other.stop()
    assert ro["state"] == "completed" and [h["state"] for h in ro["hosts"]] == ["installed"] * 4, ro
    for a, h in zip(agents, ro["hosts"], strict=True):
        installs = _sent(a, "install_plan")
        assert [i.install_plan.plan_id for i in installs] == [h["plan_id"]], (a.host_id, installs)
    derived = await backend.scalar(
        "SELECT count(*) FROM plans WHERE rollout_id = CAST(:r AS uuid) AND derived_from IS NOT NULL", r=rid
    )
    assert derived == 3, "one per-host plan for each host but the plan's own"
    trail = [a["action"] for a in (await client.get(f"/api/v1/rollouts/{rid}/audit")).json()]
    assert trail.count("rollout_host_installing") == 4 and trail.count("rollout_complete") == 1, trail
    await _close(agents)


async def _sent_async(agent, kind):
    return _sent(agent, kind)


async def _count(backend):
    return await backend.scalar("SELECT count(*) FROM rollouts")


async def test_the_rest_surface_refuses_what_it_must_and_changes_nothing(backend, client, unique):
    agents, plan_id = await _fleet(backend, client, unique, 2, others=1)
    host0, other = agents[0].host_id, agents[2].host_id
    viewer_token = await token_for(backend.base_url, *await make_user(client, "viewer", unique))
    viewer = _client_as(backend, viewer_token)
    ok = {"host_id": host0, "plan_id": plan_id, "labels": {"rollout": unique}, **GUARD}
    before = await _count(backend)
    async with viewer:
        assert (await viewer.post("/api/v1/rollouts", json=ok)).status_code == 403
        assert (await viewer.get("/api/v1/rollouts")).status_code == 200
    bad_bodies = [
        {**ok, "labels": {"rollout": "a\x00b"}},
        {**ok, "labels": {"k\x00": "v"}},
        {**ok, "labels": {"rollout": "x" * 256}},
        {**ok, "labels": {"rollout": "a\x07b"}},
        {**ok, "wave_sizes": [2, 4]},
        {**ok, "wave_sizes": [1, 0]},
        {**ok, "hosts": [host0, host0]},
        {**ok, "hosts": ["a\x00"]},
        {**ok, "plan_id": "not-a-uuid"},
        {**ok, "window_s": 0},
    ]
    for body in bad_bodies:
        r = await client.post("/api/v1/rollouts", json=body)
        assert 400 <= r.status_code < 500 and r.status_code not in (404, 409), (r.status_code, r.text[:200])
    # 10 MB of label: larger than the request body limit, refused before it is read.
    value = b'{"labels": {"rollout": "' + b"x" * (10 << 20) + b'"}}'
    head = (
        f"POST /api/v1/rollouts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: {client.headers['Authorization']}\r\nContent-Length: {len(value)}\r\n\r\n"
    ).encode()
    response = await _raw_post(backend.base_url, head, [value[:1000]])
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    r = await client.post("/api/v1/rollouts", json={**ok, "plan_id": "00000000-0000-4000-8000-000000000000"})
    assert r.status_code == 404
    r = await client.post("/api/v1/rollouts", json={**ok, "hosts": [host0, other]})
    assert r.status_code == 409 and f"{other}: its /usr/bin/fake-server is build {'cd' * 20}" in r.json()["detail"]
    assert await _count(backend) == before, "nothing was stored"
    # A plan that is not approved, and an approved plan whose code hash changed since (stale approval).
    unapproved = await client.post(
        f"/api/v1/hosts/{host0}/plans",
        json={"target": "p5000-1000", "digest": agents[0].process[3], "function_index": 3, "seconds": 1},
    )
    await _until(client, host0, unapproved.json()["id"], "ready")
    r = await client.post("/api/v1/rollouts", json={**ok, "plan_id": unapproved.json()["id"]})
    assert r.status_code == 409 and "ready" in r.json()["detail"]
    async with backend.runtime.sessionmaker() as db:
        from sqlalchemy import text

        await db.execute(text("UPDATE plans SET code_sha256 = repeat('0', 64) WHERE id = :id"), {"id": plan_id})
        await db.commit()
    r = await client.post("/api/v1/rollouts", json=ok)
    assert r.status_code == 409 and "not the one approved" in r.json()["detail"]
    async with backend.runtime.sessionmaker() as db:
        await db.execute(text("UPDATE plans SET code_sha256 = approved_code_sha256 WHERE id = :id"), {"id": plan_id})
        await db.commit()
    assert await _count(backend) == before
    # Two roll-outs on one host: the second is refused while the first holds it.
    agents[0].hold = asyncio.Event()
    r = await client.post("/api/v1/rollouts", json=ok)
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    r2 = await client.post("/api/v1/rollouts", json=ok)
    assert r2.status_code == 409, r2.text
    assert await _count(backend) == before + 1
    async with _client_as(backend, viewer_token) as viewer:
        for action in ("pause", "resume", "revert"):
            assert (await viewer.post(f"/api/v1/rollouts/{rid}/{action}")).status_code == 403
    missing = "00000000-0000-4000-8000-000000000001"
    for action in ("pause", "resume", "revert"):
        assert (await client.post(f"/api/v1/rollouts/{missing}/{action}")).status_code == 404
    assert (await client.get(f"/api/v1/rollouts/{missing}")).status_code == 404
    assert (await client.get(f"/api/v1/rollouts/{missing}/audit")).status_code == 404
    assert (await client.get("/api/v1/rollouts/not-a-uuid")).status_code == 422
    assert (await client.post(f"/api/v1/rollouts/{rid}/revert")).status_code == 200
    agents[0].hold.set()
    ro = await _until_state(client, rid, "reverted")
    assert all(a.installed == {} for a in agents)
    assert ro["state"] == "reverted"
    await _close(agents)


@pytest.mark.parametrize("sizes,hosts,expected", [(None, 7, [1, 2, 4]), ([1, 3], 8, [1, 3, 3, 1]), (None, 1, [1])])
def test_wave_sizes(sizes, hosts, expected):
    from app.domain.rollouts import wave_sizes

    assert wave_sizes(sizes, hosts) == expected
