# SPDX-License-Identifier: Apache-2.0
"""Plans through the real backend with a fake agent (tests.scripted_agent) on the real stream. The fake
agent answers MakePlan with a real plan of the group fixture (made by hotpathd), renamed to the root
asked for, or with an altered one to play a lying agent.

Proven here: a plan is made through the command channel, checked and stored with its code hash and
target identity, and audited; malformed and lying plans are refused with the reason and nothing of them
is stored; the workflow's rules hold (requester ≠ approver, the approver role, install only of an
approved plan that still fits its target); an install measures the root before and after and the
agent receives the approved hash; revert; every step is in the plan's audit trail with who did it."""

import asyncio
import json
import time

import pytest
from sqlalchemy import text

from app.domain.plan_check import Code, code_hash
from tests.conftest import make_user, token_for
from tests.scripted_agent import HANG_S, PLAN_FIXTURE, wait_for_ack, wait_until

FIXTURE = json.loads(PLAN_FIXTURE.read_text())
TARGET = "p4242-1000"


async def _host_with_process(backend, client, host_id):
    agent = await backend.agent(host_id, kernel_tag=f"k-{host_id}")
    await agent.connect()
    r = await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 4242})
    assert r.status_code == 202, r.text
    digest = agent.process[3]

    async def ready():
        mods = (await client.get(f"/api/v1/hosts/{host_id}/modules", params={"target": TARGET})).json()
        return bool(mods) and mods[0]["complete"]

    await wait_until(ready)
    return agent, digest


async def _plan(client, host_id, plan_id):
    r = await client.get(f"/api/v1/hosts/{host_id}/plans/{plan_id}")
    assert r.status_code == 200, r.text
    return r.json()


async def _until(client, host_id, plan_id, *states, timeout=HANG_S):
    async def reached():
        p = await _plan(client, host_id, plan_id)
        return p if p["state"] in states else None

    return await wait_until(reached, timeout)


async def _make(client, host_id, digest, index=2):
    r = await client.post(
        f"/api/v1/hosts/{host_id}/plans",
        json={"target": TARGET, "digest": digest, "function_index": index, "seconds": 1},
    )
    assert r.status_code == 202, r.text
    assert r.json()["state"] == "planning" and r.json()["root_name"] == f"srv_fn_{index}"
    return r.json()["id"]


def _client_as(backend, token):
    import httpx

    return httpx.AsyncClient(base_url=backend.base_url, timeout=30, headers={"Authorization": f"Bearer {token}"})


async def test_a_plan_is_made_by_the_agent_checked_stored_and_audited(backend, client, unique):
    host_id = f"plan-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    plan_id = await _make(client, host_id, digest)
    p = await _until(client, host_id, plan_id, "ready", "failed")
    assert p["state"] == "ready", p["error"]
    assert p["code_sha256"] == FIXTURE["code"]["sha256"] and p["build_id"] == "ab" * 20
    assert (p["target_pid"], p["target_start_time"]) == (4242, 1000)
    assert "plan" not in p and p["members"][0] == "srv_fn_2" and p["body_etag"]
    body = (await client.get(f"/api/v1/hosts/{host_id}/plans/{plan_id}/body")).json()
    assert body["root"] == "srv_fn_2" and body["group"][0]["function"] == "srv_fn_2"
    assert body["icache_after"]["hot_lines"] == FIXTURE["icache_after"]["hot_lines"]
    sent = next(c for c in agent.commands if c.WhichOneof("kind") == "make_plan")
    assert sent.make_plan.plan_id == plan_id and sent.make_plan.digest == digest and sent.make_plan.seconds == 1
    listed = (await client.get(f"/api/v1/hosts/{host_id}/plans", params={"target": TARGET})).json()
    assert [x["id"] for x in listed] == [plan_id] and "plan" not in listed[0]
    trail = (await client.get(f"/api/v1/hosts/{host_id}/plans/{plan_id}/audit")).json()
    assert [a["action"] for a in trail] == ["plan_create", "plan_ready"]
    assert trail[0]["actor"] == "admin" and trail[1]["actor"] == f"agent:{host_id}"
    await agent.close()


def _set(path, value):
    def edit(plan):
        node = plan
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value

    return edit


def _rehash(edit):
    """An edit that keeps the code hash consistent, so only the invariant it breaks is wrong."""

    def both(plan):
        edit(plan)
        plan["code"]["sha256"] = code_hash(Code.model_validate(plan["code"]))

    return both


LIES = {
    "not JSON": (lambda plan: "{not json", "not JSON"),
    "an array": (lambda plan: "[]", "not a JSON object"),
    "code altered": (_set(["code", "hex"], "90" * FIXTURE["code"]["bytes"]), "hashes to"),
    "another root": (_set(["root"], "srv_fn_5"), "not srv_fn_2 as asked"),
    "root not first": (lambda plan: plan["group"].reverse(), "first member"),
    "block past its function": (_set(["group", 0, "size"], 10), "ends past the function"),
    "chain names a missing block": (_set(["group", 0, "chain_table", 0, "blocks"], [0, 99999]), "layout lacks"),
    "cell outside the cache": (_set(["icache_after", "cells", 0, "set"], 4096), "the cache has"),
    "totals not the sums": (_set(["totals", "hot_bytes"], 1), "group sums to"),
    "taken branches not the sums": (_set(["totals", "taken_branches_after"], 12345.0), "group sums to"),
    "negative count": (_set(["group", 1, "layout", 0, "count"], -5), "count"),
    "another process": (_set(["target", "pid"], 999), "not the process"),
    "another build": (_set(["target", "module_build_id"], "cd" * 20), "build id"),
    "unverified code": (_rehash(_set(["code", "verified"], False)), "not verified"),
    "relocation outside the code": (_rehash(_set(["code", "relocations", 0, "offset"], 10**6)), "outside the code"),
}


@pytest.mark.parametrize("lie", list(LIES))
async def test_a_malformed_or_lying_plan_is_refused_and_nothing_of_it_is_stored(backend, client, unique, lie):
    host_id = f"lie-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    edit, reason = LIES[lie]
    agent.plan_edit = edit
    plan_id = await _make(client, host_id, digest)
    p = await _until(client, host_id, plan_id, "ready", "failed")
    assert p["state"] == "failed" and reason in p["error"], p["error"]
    assert p["body_etag"] is None and p["code_sha256"] is None
    cmd = (await client.get(f"/api/v1/hosts/{host_id}/commands/{p['make_command']}")).json()
    assert cmd["state"] == "failed" and "refused" in cmd["error"]
    trail = (await client.get(f"/api/v1/hosts/{host_id}/plans/{plan_id}/audit")).json()
    assert trail[-1]["action"] == "plan_refused"
    await agent.close()


async def test_a_plan_larger_than_the_limit_is_refused(backend, client, unique):
    host_id = f"big-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    limit = backend.runtime.settings.max_plan_bytes
    backend.runtime.settings.max_plan_bytes = 20_000  # the fixture is about 47 kB
    try:
        plan_id = await _make(client, host_id, digest)
        p = await _until(client, host_id, plan_id, "ready", "failed")
    finally:
        backend.runtime.settings.max_plan_bytes = limit
    assert p["state"] == "failed" and "at most 20000" in p["error"] and p["body_etag"] is None
    await agent.close()


async def test_approval_needs_another_approver_and_install_an_approved_fresh_plan(backend, client, unique):
    host_id = f"flow-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    op_user = await make_user(client, "operator", unique)
    ap_user = await make_user(client, "approver", unique)
    operator = _client_as(backend, await token_for(backend.base_url, *op_user))
    approver = _client_as(backend, await token_for(backend.base_url, *ap_user))
    base = f"/api/v1/hosts/{host_id}/plans"
    async with operator, approver:
        r = await operator.post(base, json={"target": TARGET, "digest": digest, "function_index": 2})
        plan_id = r.json()["id"]
        await _until(client, host_id, plan_id, "ready")
        r = await operator.post(f"{base}/{plan_id}/install", json={"window_s": 1})
        assert r.status_code == 409 and "ready" in r.json()["detail"], "a plan that is not approved is not installed"
        assert (await operator.post(f"{base}/{plan_id}/approve")).status_code == 403, "operators do not approve"
        assert (await approver.post(f"{base}/{plan_id}/approve")).status_code == 409, "nothing requested yet"
        r = await approver.post(f"{base}/{plan_id}/request")
        assert r.status_code == 200 and r.json()["requested_by"] == ap_user[0]
        r = await approver.post(f"{base}/{plan_id}/approve")
        assert r.status_code == 403 and "requester" in r.json()["detail"], "the requester cannot approve"
        r = await operator.post(f"{base}/{plan_id}/install", json={"window_s": 1})
        assert r.status_code == 409, "a requested plan is not installed"
        r = await client.post(f"{base}/{plan_id}/approve")  # admin: another user with the approver's rights
        assert r.status_code == 200, r.text
        p = r.json()
        assert p["state"] == "approved" and p["approved_by"] == "admin"
        assert p["approved_code_sha256"] == p["code_sha256"] == FIXTURE["code"]["sha256"]
        assert p["approved_build_id"] == "ab" * 20
        # Install: a window before, the install with the approved hash, a window after.
        r = await operator.post(f"{base}/{plan_id}/install", json={"window_s": 1})
        assert r.status_code == 200 and r.json()["state"] == "installing", r.text
        again = await operator.post(f"{base}/{plan_id}/install", json={"window_s": 1})
        assert again.status_code == 409, "one install at a time"

        async def window(which):
            p = await _plan(client, host_id, plan_id)
            mid = p[f"{which}_measurement"]
            if mid is None or mid not in agent.measurements:
                return None
            return mid

        before = await wait_until(lambda: window("before"))
        now = time.time_ns()
        seq = await agent.send_measurement(before, now - 10**9, [(0, 1000, 4e6)])
        await wait_for_ack(agent, seq)
        p = await _until(client, host_id, plan_id, "installed", "install_failed", timeout=HANG_S)
        assert p["state"] == "installed", p["error"]
        assert p["install_detail"]["call_sites"] == 3 and p["installed_at"]
        sent = next(c for c in agent.commands if c.WhichOneof("kind") == "install_plan")
        assert sent.install_plan.approved_code_sha256 == FIXTURE["code"]["sha256"]
        assert json.loads(sent.install_plan.plan_json)["code"]["hex"] == FIXTURE["code"]["hex"]
        assert agent.installed == {plan_id: FIXTURE["code"]["sha256"]}
        after = await wait_until(lambda: window("after"))
        now = time.time_ns()
        await agent.send_measurement(after, now - 2 * 10**9, [(0, 1200, 3.6e6)])
        seq = await agent.send_measurement(after, now - 10**9, [(0, 800, 2.8e6)])
        await wait_for_ack(agent, seq)

        async def compared():
            c = (await _plan(client, host_id, plan_id))["comparison"]
            return c if c and c["after"] and c["after"]["calls"] == 2000 else None

        c = await wait_until(compared)
        assert c["before"]["calls"] == 1000 and c["before"]["wall_ns_per_call"] == pytest.approx(4000)
        assert c["after"]["calls"] == 2000 and c["after"]["wall_ns_per_call"] == pytest.approx(3200)
        assert c["change"]["wall_ns_per_call"] == pytest.approx(-0.2)
        assert c["after"]["calls_per_s"] == pytest.approx(1000)
        # The spread: each figure's range over the window's one-second intervals.
        assert c["before"]["spread"]["wall_ns_per_call"] == {"min": 4000, "max": 4000, "intervals": 1}
        assert c["after"]["spread"]["wall_ns_per_call"] == {"min": 3000, "max": 3500, "intervals": 2}
        assert c["after"]["spread"]["calls_per_s"] == {"min": 800, "max": 1200, "intervals": 2}
        assert c["before"]["vtime_ns_per_call"] is None, "the fake agent serves no vtime: no number is made up"
        assert "vtime_ns_per_call" not in c["before"]["spread"]
        # The hardware counters were asked for; this host has no PMU, so they are unavailable with the reason.
        for metric in ("cycles", "instructions", "icache_stall", "branch_mispredict"):
            assert c["after"][f"{metric}_per_call"] is None and c["change"][f"{metric}_per_call"] is None
            assert "no hardware PMU" in c["after"]["unavailable"][metric], c["after"]["unavailable"]
        # Revert, by one click.
        r = await operator.post(f"{base}/{plan_id}/revert")
        assert r.status_code == 200 and r.json()["state"] == "reverting"
        p = await _until(client, host_id, plan_id, "reverted")
        assert p["revert_by"] == op_user[0] and p["revert_detail"]["status"] == "reverted" and agent.installed == {}
        assert (await operator.post(f"{base}/{plan_id}/revert")).status_code == 409
        trail = (await operator.get(f"{base}/{plan_id}/audit")).json()
        steps = [(a["action"], a["actor"]) for a in trail]
        for step in [
            ("plan_create", op_user[0]),
            ("plan_ready", f"agent:{host_id}"),
            ("plan_request", ap_user[0]),
            ("plan_approve", "admin"),
            ("plan_install_requested", op_user[0]),
            ("plan_installed", f"agent:{host_id}"),
            ("plan_revert_requested", op_user[0]),
            ("plan_reverted", f"agent:{host_id}"),
        ]:
            assert step in steps, (step, steps)
        assert all(
            a["detail"]["code_sha256"] == FIXTURE["code"]["sha256"] for a in trail if a["action"] != "plan_create"
        )
    await agent.close()


async def test_the_maker_cannot_approve_a_plan_someone_else_requested(backend, client, unique):
    host_id = f"maker-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    op_user = await make_user(client, "operator", unique)
    ap_user = await make_user(client, "approver", unique)
    operator = _client_as(backend, await token_for(backend.base_url, *op_user))
    approver = _client_as(backend, await token_for(backend.base_url, *ap_user))
    base = f"/api/v1/hosts/{host_id}/plans"
    async with operator, approver:
        plan_id = await _make(client, host_id, digest)  # made by admin
        await _until(client, host_id, plan_id, "ready")
        r = await operator.post(f"{base}/{plan_id}/request")
        assert r.status_code == 200 and r.json()["requested_by"] == op_user[0]
        r = await client.post(f"{base}/{plan_id}/approve")  # the maker, who holds the approver's rights
        assert r.status_code == 403 and "maker" in r.json()["detail"], r.text
        assert (await _plan(client, host_id, plan_id))["state"] == "requested"
        r = await approver.post(f"{base}/{plan_id}/approve")  # a third person
        assert r.status_code == 200 and r.json()["approved_by"] == ap_user[0], r.text
    await agent.close()


async def test_a_rejected_plan_and_a_stale_plan_are_never_installed(backend, client, unique):
    host_id = f"stale-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    ap_user = await make_user(client, "approver", unique)
    approver = _client_as(backend, await token_for(backend.base_url, *ap_user))
    base = f"/api/v1/hosts/{host_id}/plans"
    async with approver:
        first = await _make(client, host_id, digest)
        second = await _make(client, host_id, digest, index=3)
        for pid in (first, second):
            await _until(client, host_id, pid, "ready")
            assert (await client.post(f"{base}/{pid}/request")).status_code == 200
        r = await approver.post(f"{base}/{first}/reject", json={"reason": "not this week"})
        assert r.status_code == 200 and r.json()["state"] == "rejected" and r.json()["rejected_by"] == ap_user[0]
        assert (await client.post(f"{base}/{first}/install", json={"window_s": 1})).status_code == 409
        assert (await approver.post(f"{base}/{second}/approve")).status_code == 200
        # The process ends: the approved plan is stale and is not installed.
        r = await client.delete(f"/api/v1/hosts/{host_id}/targets/{TARGET}")
        assert r.status_code == 202

        async def detached():
            ts = (await client.get(f"/api/v1/hosts/{host_id}/targets")).json()
            return any(t["id"] == TARGET and t["state"] != "attached" for t in ts)

        await wait_until(detached)
        r = await client.post(f"{base}/{second}/install", json={"window_s": 1})
        assert r.status_code == 409 and "stale" in r.json()["detail"] and "detached" in r.json()["detail"]
        p = await _plan(client, host_id, second)
        assert p["state"] == "stale" and "detached" in p["stale_reason"]
    assert not any(c.WhichOneof("kind") == "install_plan" for c in agent.commands)
    async with backend.runtime.engine.connect() as conn:
        n = (
            await conn.execute(
                text("SELECT count(*) FROM audit_log WHERE target = :t AND action = 'plan_stale'"), {"t": second}
            )
        ).scalar_one()
    assert n == 1
    await agent.close()


async def test_viewers_cannot_plan_and_operators_cannot_approve(backend, client, unique):
    host_id = f"roles-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    viewer = _client_as(backend, await token_for(backend.base_url, *await make_user(client, "viewer", unique)))
    base = f"/api/v1/hosts/{host_id}/plans"
    async with viewer:
        r = await viewer.post(base, json={"target": TARGET, "digest": digest, "function_index": 1})
        assert r.status_code == 403
        plan_id = await _make(client, host_id, digest)
        await _until(client, host_id, plan_id, "ready")
        for step in ("request", "approve", "revert"):
            assert (await viewer.post(f"{base}/{plan_id}/{step}")).status_code == 403, step
        assert (await viewer.get(f"{base}/{plan_id}")).status_code == 200, "viewers read plans"
    r = await client.post(base, json={"target": TARGET, "digest": "0" * 64, "function_index": 1})
    assert r.status_code == 404
    # The console names the root by its function id.
    page = (await client.get(f"/api/v1/hosts/{host_id}/functions", params={"target": TARGET, "q": "srv_fn_4"})).json()
    r = await client.post(base, json={"target": TARGET, "function_id": page["items"][0]["id"]})
    assert r.status_code == 202 and r.json()["root_name"] == "srv_fn_4" and r.json()["root_function_index"] == 4
    both = {"target": TARGET, "function_id": page["items"][0]["id"], "digest": digest, "function_index": 4}
    assert (await client.post(base, json=both)).status_code == 422, "one way of naming the root, not two"
    await agent.close()


async def test_every_plan_write_route_is_denied_without_its_role_and_its_state(backend, client, unique):
    """Each write route (make, request, approve, reject, install, revert) by each role and in each state
    where it does not apply: refused (403 without the role or for the requester deciding, 409 in a state it
    does not apply to), and a refusal changes nothing: the plan keeps its state and audit trail, and no
    InstallPlan or RevertPlan reaches the agent (the scripted fake, which records every command)."""
    host_id = f"deny-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    users = {
        role: _client_as(backend, await token_for(backend.base_url, *await make_user(client, role, unique)))
        for role in ("viewer", "operator", "approver")
    }
    viewer, operator, approver = users["viewer"], users["operator"], users["approver"]
    base = f"/api/v1/hosts/{host_id}/plans"
    try:
        ready = await _make(client, host_id, digest, 1)
        await _until(client, host_id, ready, "ready")
        requested = await _make(client, host_id, digest, 2)
        await _until(client, host_id, requested, "ready")
        assert (await operator.post(f"{base}/{requested}/request")).status_code == 200
        approved = await _approved(operator, approver, host_id, digest, 3)
        rejected = await _make(client, host_id, digest, 4)
        await _until(client, host_id, rejected, "ready")
        assert (await operator.post(f"{base}/{rejected}/request")).status_code == 200
        assert (await approver.post(f"{base}/{rejected}/reject", json={"reason": "no"})).status_code == 200
        plans = {"ready": ready, "requested": requested, "approved": approved, "rejected": rejected}
        before = {s: (await _plan(client, host_id, p))["state"] for s, p in plans.items()}
        trails = {s: len((await client.get(f"{base}/{p}/audit")).json()) for s, p in plans.items()}
        assert before == {s: s for s in plans}
        sent = len(agent.commands)

        async def refused(who, step, plan_state, status, body=None):
            r = await who.post(f"{base}/{plans[plan_state]}/{step}", json=body or {})
            assert r.status_code == status, (step, plan_state, r.status_code, r.text)

        window = {"window_s": 1}
        for state in plans:
            # A viewer may do nothing, in any state.
            for step, body in (
                ("request", None),
                ("approve", None),
                ("reject", {"reason": "x"}),
                ("install", window),
                ("revert", None),
            ):
                await refused(viewer, step, state, 403, body)
            # An operator may not decide.
            await refused(operator, "approve", state, 403)
            await refused(operator, "reject", state, 403, {"reason": "x"})
            # Nothing is reverted that is not installed.
            await refused(operator, "revert", state, 409)
            await refused(approver, "revert", state, 409)
            if state != "approved":
                # Only an approved plan is installed, whoever asks.
                for who in (operator, approver, client):
                    await refused(who, "install", state, 409, window)
            if state != "ready":
                await refused(operator, "request", state, 409)
            if state != "requested":
                await refused(approver, "approve", state, 409)
                await refused(approver, "reject", state, 409, {"reason": "x"})
        # The requester (the operator) cannot decide their own request even with the role: the admin
        # requests here, and the admin's own approval and rejection are refused.
        own = await _make(client, host_id, digest, 5)
        await _until(client, host_id, own, "ready")
        assert (await client.post(f"{base}/{own}/request")).status_code == 200
        assert (await client.post(f"{base}/{own}/approve")).status_code == 403
        assert (await client.post(f"{base}/{own}/reject", json={"reason": "x"})).status_code == 403
        assert (await client.post(f"{base}/{own}/install", json=window)).status_code == 409
        assert (
            await viewer.post(base, json={"target": TARGET, "digest": digest, "function_index": 1})
        ).status_code == 403
        # Nothing changed and nothing reached the agent.
        assert {s: (await _plan(client, host_id, p))["state"] for s, p in plans.items()} == before
        assert {s: len((await client.get(f"{base}/{p}/audit")).json()) for s, p in plans.items()} == trails
        kinds = [c.WhichOneof("kind") for c in agent.commands[sent:]]
        assert "install_plan" not in kinds and "revert_plan" not in kinds, kinds
        assert not agent.installed
    finally:
        for c in users.values():
            await c.aclose()
    await agent.close()


async def test_the_live_socket_carries_no_command_and_no_subscription_it_may_not_have(backend, client, unique):
    """The WebSocket is read-only: a viewer's socket sending command-shaped messages (install, approve,
    revert, a raw install_plan command, a subscribe carrying an action) and subscriptions to topics that do
    not exist (a plan, a path, a control character, too many) changes nothing: the approved plan stays
    approved with the same audit trail, nothing reaches the agent (the scripted fake), only the valid topic
    is subscribed, and the socket keeps serving it. A binary frame closes the socket (1003)."""
    from websockets.asyncio.client import connect

    host_id = f"ws-deny-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    ap_user = await make_user(client, "approver", unique)
    op_user = await make_user(client, "operator", unique)
    viewer_token = await token_for(backend.base_url, *await make_user(client, "viewer", unique))
    base = f"/api/v1/hosts/{host_id}/plans"
    async with (
        _client_as(backend, await token_for(backend.base_url, *ap_user)) as approver,
        _client_as(backend, await token_for(backend.base_url, *op_user)) as operator,
    ):
        plan_id = await _approved(operator, approver, host_id, digest, 2)
    trail = (await client.get(f"{base}/{plan_id}/audit")).json()
    sent = len(agent.commands)
    hub = backend.runtime.hub
    before = set(hub._subscribers)
    url = backend.base_url.replace("http://", "ws://") + f"/api/v1/ws?token={viewer_token}"
    async with connect(url) as ws:
        [sub] = await wait_until(lambda: _new_subscribers(hub, before))
        shaped = [
            {"type": "install", "plan_id": plan_id, "host_id": host_id, "window_s": 1},
            {"type": "approve", "plan_id": plan_id},
            {"type": "revert", "plan_id": plan_id},
            {
                "type": "command",
                "host_id": host_id,
                "kind": "install_plan",
                "params": {"plan_id": plan_id, "approved_code_sha256": "0" * 64},
            },
            {"type": "subscribe", "topics": [f"host:{host_id}"], "action": "install", "plan_id": plan_id},
            {
                "type": "subscribe",
                "topics": [
                    f"plan:{plan_id}",
                    "commands",
                    "host:x\nkind:install",
                    "measurement:../../x",
                    *[f"host:h{i}" for i in range(200)],
                    f"host:{host_id}",
                ],
            },
            ["install", plan_id],
            "install " + plan_id,
            42,
            None,
        ]
        for msg in shaped:
            await ws.send(json.dumps(msg))
        await ws.send("{not json")
        # The last valid subscribe wins: only well-formed topics, at most 64, the plan: and path ones dropped.
        await asyncio.sleep(0.5)
        assert len(sub.topics) <= 64 and all(
            t == "hosts" or t.startswith(("host:h", "host:" + host_id)) for t in sub.topics
        ), sub.topics
        assert not any(t.startswith(("plan:", "commands", "measurement:..")) or "\n" in t for t in sub.topics)
        # The socket still serves: its host's events arrive after all that.
        await ws.send(json.dumps({"type": "subscribe", "topics": [f"host:{host_id}"]}))
        await asyncio.sleep(0.2)
        assert (await client.post(f"/api/v1/hosts/{host_id}/targets", json={"pid": 4242})).status_code in (200, 202)
        while True:
            got = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if got.get("type") in ("command", "targets"):
                break
            assert got.get("type") in ("host", "ping"), got
    # A binary frame is refused: the socket is closed with 1003 (unsupported data).
    from websockets.exceptions import ConnectionClosed

    async with connect(url) as ws:
        await ws.send(b"\x00install " + plan_id.encode())
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(ws.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003
    p = await _plan(client, host_id, plan_id)
    assert p["state"] == "approved" and p["install_command"] is None
    assert (await client.get(f"{base}/{plan_id}/audit")).json() == trail
    kinds = [c.WhichOneof("kind") for c in agent.commands[sent:]]
    assert "install_plan" not in kinds and "revert_plan" not in kinds and not agent.installed, kinds
    await agent.close()


async def test_a_plan_change_of_state_is_pushed_to_the_hosts_open_pages_at_once(backend, client, unique):
    """An open plan page hears its plan's changes on the host's topic as they are committed: the agent's
    answer (ready), the request and the approval each arrive as a plan event with the new state, well
    before the page's 10-second poll would have seen them."""
    from websockets.asyncio.client import connect

    host_id = f"ws-plan-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    ap_user = await make_user(client, "approver", unique)
    viewer_token = await token_for(backend.base_url, *await make_user(client, "viewer", unique))
    hub = backend.runtime.hub
    before = set(hub._subscribers)
    url = backend.base_url.replace("http://", "ws://") + f"/api/v1/ws?token={viewer_token}"
    async with connect(url) as ws, _client_as(backend, await token_for(backend.base_url, *ap_user)) as approver:
        [sub] = await wait_until(lambda: _new_subscribers(hub, before))
        await ws.send(json.dumps({"type": "subscribe", "topics": [f"host:{host_id}"]}))
        await wait_until(lambda: _subscribed(sub, f"host:{host_id}"))
        plan_id = await _approved(client, approver, host_id, digest, 2)
        states = []
        while "approved" not in states:
            got = json.loads(await asyncio.wait_for(ws.recv(), 5))
            if got.get("type") == "plan":
                assert got["host_id"] == host_id and got["plan_id"] == plan_id, got
                states.append(got["state"])
        assert states == ["planning", "ready", "requested", "approved"], states
    await agent.close()


async def _subscribed(sub, topic):
    return topic in sub.topics or None


async def _new_subscribers(hub, before):
    return [s for s in hub._subscribers if s not in before] or None


async def _approved(client, approver, host_id, digest, index):
    base = f"/api/v1/hosts/{host_id}/plans"
    plan_id = await _make(client, host_id, digest, index)
    await _until(client, host_id, plan_id, "ready")
    assert (await client.post(f"{base}/{plan_id}/request")).status_code == 200
    r = await approver.post(f"{base}/{plan_id}/approve")
    assert r.status_code == 200, r.text
    return plan_id


async def _reconcile_setup(backend, client, unique, host_id):
    """A host with a process (the scripted agent), an approver's client, the plans' base path, the backend's
    plan workflow and its reconciliation grace."""
    agent, digest = await _host_with_process(backend, client, host_id)
    ap_user = await make_user(client, "approver", unique)
    approver = _client_as(backend, await token_for(backend.base_url, *ap_user))
    grace = backend.runtime.settings.plan_reconcile_grace_s
    # A day, until the test sets 0 itself: with the default (60 s) the backend's own periodic round settled
    # a plan the test still expected "installing" once the test had taken 132 s on a loaded machine. The
    # caller restores the returned grace.
    backend.runtime.settings.plan_reconcile_grace_s = 86_400.0
    return (agent, digest, approver, f"/api/v1/hosts/{host_id}/plans", backend.runtime.plans, grace)


async def test_install_flows_cut_off_by_a_backend_stop_are_settled_from_the_agents_list(backend, client, unique):
    host_id = f"reconcile-{unique}"
    agent, digest, approver, base, plans, grace = await _reconcile_setup(backend, client, unique, host_id)
    try:
        async with approver:
            lost = await _approved(client, approver, host_id, digest, 2)
            unsent = await _approved(client, approver, host_id, digest, 3)
            # One flow gets as far as the install, whose answer is lost; the backend stops (its flows are
            # cancelled, as on shutdown) before it hears.
            agent.lose_install_answers = True
            assert (await client.post(f"{base}/{lost}/install", json={"window_s": 1})).status_code == 200
            await _true(lambda: lost in agent.installed, timeout=HANG_S)
            await plans.stop()
            # The other is cut off in its window before, before any InstallPlan went out.
            assert (await client.post(f"{base}/{unsent}/install", json={"window_s": 1})).status_code == 200
            await wait_until(lambda: _plan_field(client, host_id, unsent, "before_measurement"), timeout=HANG_S)
            await plans.stop()
            assert (await _plan(client, host_id, lost))["state"] == "installing"
            assert (await _plan(client, host_id, unsent))["state"] == "installing"
            assert (await _plan(client, host_id, unsent))["install_command"] is None

            # Both are older than their window (1 s) plus the grace, 0 from here on (until now the default
            # kept the backend's own periodic round away from them).
            backend.runtime.settings.plan_reconcile_grace_s = 0
            await asyncio.sleep(1.2)
            # Settled here, or by the backend's own periodic round if it came first (each plan once: the
            # settling re-reads it under a row lock).
            await plans.reconcile()
            assert any(c.WhichOneof("kind") == "list_installed" for c in agent.commands)
            p = await _plan(client, host_id, lost)
            assert p["state"] == "installed" and p["install_detail"]["code_sha256"] == FIXTURE["code"]["sha256"]
            cmd = (await client.get(f"/api/v1/hosts/{host_id}/commands/{p['install_command']}")).json()
            assert cmd["state"] == "failed" and "answer was lost" in cmd["error"]
            q = await _plan(client, host_id, unsent)
            assert q["state"] == "install_failed" and "before it sent the install" in q["error"]
            for plan_id, result in ((lost, "installed"), (unsent, "install_failed")):
                trail = (await client.get(f"{base}/{plan_id}/audit")).json()
                assert [a["action"] for a in trail].count("plan_reconciled") == 1
                last = trail[-1]
                assert last["action"] == "plan_reconciled" and last["actor"] == "system"
                assert last["detail"]["result"] == result and last["detail"]["was"] == "installing"
            # The window the cut-off flow left running on the agent is stopped.
            window = (await _plan(client, host_id, unsent))["before_measurement"]

            async def window_stopped():
                m = (await client.get(f"/api/v1/hosts/{host_id}/measurements/{window}")).json()
                return m if m["state"] == "stopped" else None

            await wait_until(window_stopped, timeout=HANG_S)
            stops = [
                c
                for c in agent.commands
                if c.WhichOneof("kind") == "stop_measurement" and c.stop_measurement.measurement_id == window
            ]
            assert stops, "the orphaned window was stopped by the reconciliation"
            # Settled plans are left alone; the installed one reverts as usual.
            assert await plans.reconcile() == 0
            agent.lose_install_answers = False
            assert (await client.post(f"{base}/{lost}/revert")).status_code == 200
            assert (await _until(client, host_id, lost, "reverted"))["revert_detail"]["status"] == "reverted"
    finally:
        backend.runtime.settings.plan_reconcile_grace_s = grace
        agent.lose_install_answers = False
    await agent.close()


async def test_plans_are_settled_from_the_installs_every_hello_lists(backend, client, unique):
    """The agent lists what its journals hold in Hello (the real agent's side: agent/tests/python/test_plans.py);
    the backend settles plans no flow runs from it on each connect, and trusts a listing only when it is the
    approved plan in the plan's process. The agent here is the scripted fake."""
    from app.protocol.proto import pb

    host_id = f"hello-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    ap_user = await make_user(client, "approver", unique)
    approver = _client_as(backend, await token_for(backend.base_url, *ap_user))
    base = f"/api/v1/hosts/{host_id}/plans"
    plans = backend.runtime.plans
    try:
        async with approver:
            done = await _approved(client, approver, host_id, digest, 2)
            lost = await _approved(client, approver, host_id, digest, 3)
            assert (await client.post(f"{base}/{done}/install", json={"window_s": 1})).status_code == 200
            await _until(client, host_id, done, "installed", timeout=HANG_S)
            # The second install's answer is lost and its flow cut off (as by a backend stop).
            agent.lose_install_answers = True
            assert (await client.post(f"{base}/{lost}/install", json={"window_s": 1})).status_code == 200
            await _true(lambda: lost in agent.installed, timeout=HANG_S)
            await plans.stop()
            assert (await _plan(client, host_id, lost))["state"] == "installing"
            d, p_lost = await _plan(client, host_id, done), await _plan(client, host_id, lost)

            def listed(p, **over):
                fields = dict(
                    plan_id=p["id"],
                    state="installed",
                    pid=p["target_pid"],
                    start_time=p["target_start_time"],
                    root=p["root_name"],
                    code_sha256=p["approved_code_sha256"],
                    heap=0x7F0000000000,
                    heap_len=4096,
                )
                return pb.InstalledPlan(**{**fields, **over})

            async def reconnect(installs):
                await agent.close()
                agent.hello_installs = installs
                await agent.connect()

            # An agent that says nothing of its installs (no state folder) changes no plan.
            await reconnect(None)
            assert (await _plan(client, host_id, lost))["state"] == "installing"
            assert (await _plan(client, host_id, done))["state"] == "installed"
            # Listings that are not the approved plan in its process, and an install no plan has, change
            # nothing and are audited.
            await reconnect(
                [
                    listed(p_lost, code_sha256="ab" * 32),
                    listed(d, pid=d["target_pid"] + 1),
                    listed(d, plan_id="not-a-plan-of-this-host"),
                ]
            )
            await reconnect(
                [
                    listed(p_lost, start_time=p_lost["target_start_time"] + 1),
                    listed(d),
                    listed(d, plan_id="not-a-plan-of-this-host"),
                ]
            )
            assert (await _plan(client, host_id, lost))["state"] == "installing"
            assert (await _plan(client, host_id, done))["state"] == "installed"
            trail = (await client.get(f"{base}/{lost}/audit")).json()
            assert [a["action"] for a in trail].count("plan_install_unknown") == 2
            async with backend.runtime.sessionmaker() as db:
                unknown = (
                    (
                        await db.execute(
                            text("SELECT detail FROM audit_log WHERE action = 'plan_install_unknown' AND target = :t"),
                            {"t": host_id},
                        )
                    )
                    .scalars()
                    .all()
                )
            # The id no plan has, listed by both Hellos: one summary row (the same set is not audited again).
            assert [(u["count"], u["plan_ids"]) for u in unknown] == [(1, ["not-a-plan-of-this-host"])]
            # The agent restarted and lists both installed: the cut-off flow's plan is installed, its command's
            # lost answer recorded.
            await reconnect([listed(p_lost), listed(d)])
            p = await _plan(client, host_id, lost)
            assert p["state"] == "installed" and p["install_detail"]["code_sha256"] == p["approved_code_sha256"]
            cmd = (await client.get(f"/api/v1/hosts/{host_id}/commands/{p['install_command']}")).json()
            assert cmd["state"] == "failed" and "answer was lost" in cmd["error"]
            last = (await client.get(f"{base}/{lost}/audit")).json()[-1]
            assert (last["action"], last["actor"]) == ("plan_reconciled", "system")
            assert last["detail"]["result"] == "installed" and last["detail"]["was"] == "installing"
            assert last["detail"]["source"] == "hello"
            # The console finds installed groups by state, with their functions.
            r = await client.get(base, params={"state": ["installed"], "target": TARGET})
            listed_installed = {p["id"]: p for p in r.json()}
            assert set(listed_installed) == {lost, done}
            assert listed_installed[lost]["members"] == ["srv_fn_3", *(g["function"] for g in FIXTURE["group"][1:])]
            assert (await client.get(base, params={"state": ["no_such_state"]})).status_code == 422
            # Listed again: nothing changes (each plan settled once).
            await reconnect([listed(p_lost), listed(d)])
            assert [a["action"] for a in (await client.get(f"{base}/{lost}/audit")).json()].count(
                "plan_reconciled"
            ) == 1
            # The journals no longer hold them (reverted by the agent's start-up recovery, or the process
            # exited; a kept heap): both are reverted, with the reason.
            await reconnect([listed(d, state="heap_kept")])
            for plan_id, why in ((lost, "does not list the plan"), (done, "lists the plan as heap_kept")):
                p = await _plan(client, host_id, plan_id)
                assert p["state"] == "reverted" and why in p["revert_detail"]["reason"], p["revert_detail"]
                last = (await client.get(f"{base}/{plan_id}/audit")).json()[-1]
                assert last["action"] == "plan_reconciled" and last["detail"]["was"] == "installed"
    finally:
        agent.lose_install_answers = False
        agent.hello_installs = None
    await agent.close()


async def test_a_hello_listing_1024_unknown_installs_is_audited_once_in_one_row(backend, unique):
    """An agent that lists 1024 installs no plan has, on every reconnect: one audit row naming the count and
    a bounded list of ids, none for a reconnect with the same list, one more when the list changes."""
    from app.protocol.agent_input import MAX_INSTALLS
    from app.protocol.proto import pb

    host_id = f"flood-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"k-{host_id}")
    ids = [f"ghost-{n:04d}" for n in range(MAX_INSTALLS)]

    def installs(names):
        return [
            pb.InstalledPlan(
                plan_id=n,
                state="installed",
                pid=4242,
                start_time=1000,
                root="f",
                code_sha256="ab" * 32,
                heap=0x7F0000000000,
                heap_len=4096,
            )
            for n in names
        ]

    async def rows():
        async with backend.runtime.sessionmaker() as db:
            return (
                await db.execute(
                    text(
                        "SELECT target, detail FROM audit_log WHERE action = 'plan_install_unknown' AND actor = :a "
                        "ORDER BY id"
                    ),
                    {"a": f"agent:{host_id}"},
                )
            ).all()

    try:
        for listing in (ids, ids, ids[1:]):
            agent.hello_installs = installs(listing)
            await agent.connect()
            await agent.close()
    finally:
        await agent.close()
    found = await rows()
    assert len(found) == 2, f"{len(found)} audit rows"
    assert all(target == host_id for target, _ in found)
    first, second = found[0].detail, found[1].detail
    named = len(first["plan_ids"])
    assert 0 < named <= 64, "a bounded list of the ids"
    assert first["count"] == MAX_INSTALLS and first["plan_ids"] == ids[:named]
    assert second["count"] == MAX_INSTALLS - 1 and second["plan_ids"] == ids[1 : named + 1]


async def test_reverts_whose_answer_was_lost_are_settled_from_the_agents_report(backend, client, unique):
    """A plan `reverting` whose RevertPlan answer never came (lost with the stream, or its agent died after the
    revert and before it kept the answer) does not stay `reverting`: ListInstalled (once the answer is overdue)
    and every Hello settle it from what the agent reports — gone → `reverted`, still installed → `installed`
    with the error that the revert did not complete — and a revert the agent runs again and answers
    `nothing_installed` agrees with them. The agent here is the scripted fake."""
    from app.protocol.proto import pb

    host_id = f"unrevert-{unique}"
    agent, digest, approver, base, plans, grace = await _reconcile_setup(backend, client, unique, host_id)

    async def reconnect(installs):
        await agent.close()
        agent.hello_installs = installs
        await agent.connect()

    async def reverting(plan_id):
        r = await client.post(f"{base}/{plan_id}/revert")
        assert r.status_code == 200 and r.json()["state"] == "reverting", r.text
        p = await _plan(client, host_id, plan_id)
        await _true(lambda: any(c.id == p["revert_command"] for c in agent.commands), timeout=HANG_S)
        return p["revert_command"]

    async def last_reconciled(plan_id):
        trail = (await client.get(f"{base}/{plan_id}/audit")).json()
        return [a for a in trail if a["action"] == "plan_reconciled"][-1]

    try:
        async with approver:
            ids = [await _approved(client, approver, host_id, digest, i) for i in (2, 3, 4)]
            for plan_id in ids:
                assert (await client.post(f"{base}/{plan_id}/install", json={"window_s": 1})).status_code == 200
                assert (await _until(client, host_id, plan_id, "installed", timeout=HANG_S))["state"] == "installed"
            a, b, c = ids

            # The RevertPlan is lost before the agent runs it: its list, once the answer is overdue, still
            # holds the plan, which is installed again with the reason.
            agent.drop_revert_commands = True
            first = await reverting(a)
            await asyncio.sleep(0.5)
            assert (await _plan(client, host_id, a))["state"] == "reverting", "an answer within the grace is awaited"
            assert await plans.reconcile() == 0
            backend.runtime.settings.plan_reconcile_grace_s = 0
            await asyncio.sleep(0.2)
            await plans.reconcile()  # or the backend's own periodic round, if it came first
            p = await _plan(client, host_id, a)
            assert p["state"] == "installed" and "the revert did not complete" in p["error"], p
            assert a in agent.installed
            cmd = (await client.get(f"/api/v1/hosts/{host_id}/commands/{first}")).json()
            assert cmd["state"] == "failed" and "answer was lost" in cmd["error"]
            last = await last_reconciled(a)
            assert last["actor"] == "system" and last["detail"]["was"] == "reverting"
            assert last["detail"]["result"] == "installed"

            # The revert is made but its answer lost: the list no longer holds the plan, which is reverted.
            agent.drop_revert_commands = False
            agent.lose_revert_answers = True
            await reverting(a)
            await _true(lambda: a not in agent.installed, timeout=HANG_S)
            await plans.reconcile()
            p = await _plan(client, host_id, a)
            assert p["state"] == "reverted" and p["revert_detail"]["status"] == "reconciled", p
            assert "settled from the agent's report" in p["revert_detail"]["reason"]
            last = await last_reconciled(a)
            assert last["detail"]["result"] == "reverted"
            assert "settled from the agent's report" in last["detail"]["reason"]
            backend.runtime.settings.plan_reconcile_grace_s = grace

            # The agent dies after a revert, before it kept its answer, and comes back: its Hello does not
            # list the plan, which is reverted before Welcome; the command is not sent again.
            second = await reverting(b)
            await _true(lambda: b not in agent.installed, timeout=HANG_S)
            agent.lose_revert_answers = False
            sent_before = sum(x.id == second for x in agent.commands)
            # The Hello is the agent's truth: c is still installed, so it is listed. (This Hello once listed
            # nothing, which passed only while c's install flow, which on_hello skips, was still in its window
            # after: on a loaded machine the flow had ended, and that Hello rightly reverted c.)
            await _true(lambda: c not in plans.tasks, timeout=HANG_S)  # as on a loaded machine: c's flow has ended
            pc = await _plan(client, host_id, c)
            await reconnect(
                [
                    pb.InstalledPlan(
                        plan_id=c,
                        state="installed",
                        pid=pc["target_pid"],
                        start_time=pc["target_start_time"],
                        root=pc["root_name"],
                        code_sha256=pc["approved_code_sha256"],
                        heap=0x7F0000000000,
                        heap_len=4096,
                    )
                ]
            )
            assert (await _plan(client, host_id, c))["state"] == "installed"
            p = await _plan(client, host_id, b)
            assert p["state"] == "reverted" and "settled from the agent's report" in p["revert_detail"]["reason"], p
            last = await last_reconciled(b)
            assert last["detail"]["source"] == "hello" and last["detail"]["was"] == "reverting"
            cmd = (await client.get(f"/api/v1/hosts/{host_id}/commands/{second}")).json()
            assert cmd["state"] == "failed" and "answer was lost" in cmd["error"]
            await asyncio.sleep(0.5)
            assert sum(x.id == second for x in agent.commands) == sent_before, "a settled revert is not resent"
            assert (await _plan(client, host_id, b))["state"] == "reverted"

            # The same, from an agent whose Hello says nothing of its installs: the revert is sent again, the
            # agent runs it and answers that nothing is installed under the plan's id — reverted too.
            agent.lose_revert_answers = True
            third = await reverting(c)
            await _true(lambda: c not in agent.installed, timeout=HANG_S)
            agent.lose_revert_answers = False
            await reconnect(None)
            p = await _until(client, host_id, c, "reverted", "installed")
            assert p["state"] == "reverted" and p["revert_detail"]["status"] == "nothing_installed", p
            cmd = (await client.get(f"/api/v1/hosts/{host_id}/commands/{third}")).json()
            assert cmd["state"] == "failed" and "nothing is installed" in cmd["error"]
            assert not agent.installed
    finally:
        backend.runtime.settings.plan_reconcile_grace_s = grace
        agent.lose_revert_answers = agent.drop_revert_commands = False
        agent.hello_installs = None
    await agent.close()


async def _true(cond, timeout):
    async def check():
        return cond()

    return await wait_until(check, timeout)


async def _plan_field(client, host_id, plan_id, field):
    return (await _plan(client, host_id, plan_id))[field]


async def test_a_16_mib_plan_fits_the_stream_both_ways(backend, client, unique):
    """The plan size limit and the gRPC message limit are one setting: a plan of max_plan_bytes travels
    from the agent (PlanResult), is stored and served whole (its body), and its install carries what the
    agent's installer reads (InstallPlan)."""
    settings = backend.runtime.settings
    assert settings.max_plan_bytes == 16 << 20
    assert settings.grpc_max_message_bytes >= settings.max_plan_bytes + (64 << 10)
    host_id = f"huge-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    ap_user = await make_user(client, "approver", unique)
    filler = settings.max_plan_bytes - len(json.dumps(FIXTURE)) - 2048

    def pad(plan):
        plan["notes_padding"] = "x" * filler  # an unknown field: kept, as a newer agent's would be
        out = json.dumps(plan)
        assert (16 << 20) - 4096 < len(out) <= settings.max_plan_bytes
        return out

    agent.plan_edit = pad
    async with _client_as(backend, await token_for(backend.base_url, *ap_user)) as approver:
        plan_id = await _approved(client, approver, host_id, digest, 2)
        agent.plan_edit = None
        base = f"/api/v1/hosts/{host_id}/plans"
        assert (await client.post(f"{base}/{plan_id}/install", json={"window_s": 1})).status_code == 200
        p = await _until(client, host_id, plan_id, "installed", "install_failed", timeout=HANG_S)
        assert p["state"] == "installed", p["error"]
        sent = next(
            c for c in agent.commands if c.WhichOneof("kind") == "install_plan" and c.install_plan.plan_id == plan_id
        )
        # The install carries what the agent's installer reads, not the rest of the 16 MiB.
        carried = json.loads(sent.install_plan.plan_json)
        assert "notes_padding" not in carried and len(sent.install_plan.plan_json) < len(json.dumps(FIXTURE))
        body = await client.get(f"{base}/{plan_id}/body")
        assert len(body.content) > (16 << 20) - (64 << 10) and "notes_padding" in body.json()
    await agent.close()
