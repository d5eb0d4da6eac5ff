# SPDX-License-Identifier: Apache-2.0
"""Hot-set plans (PlanCreate.hot_set) through the real backend with the scripted agent: a process's whole
hot set is asked for with no root, the agent's plan names its first function laid out, which becomes the
plan's root (digest, index and name from the target's catalog); approval, install with its windows and
revert are those of any plan. Attacked: the kernel, another host's target, a viewer, seconds out of
bounds, a root named too, an agent answering a hot-set request with a root plan and the reverse."""

import json
import time

from tests.conftest import make_user, token_for
from tests.grpc.test_plans import FIXTURE, TARGET, _client_as, _host_with_process, _plan, _until
from tests.scripted_agent import HOT_SET_FIRST, wait_for_ack, wait_until


async def _hot_set(client, host_id, **extra):
    r = await client.post(
        f"/api/v1/hosts/{host_id}/plans", json={"target": TARGET, "hot_set": True, "seconds": 2, **extra}
    )
    assert r.status_code == 202, r.text
    assert r.json()["hot_set"] is True and r.json()["state"] == "planning"
    return r.json()["id"]


async def test_a_hot_set_plan_is_made_approved_installed_and_reverted(backend, client, unique):
    host_id = f"hotset-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    ap_user = await make_user(client, "approver", unique)
    approver = _client_as(backend, await token_for(backend.base_url, *ap_user))
    base = f"/api/v1/hosts/{host_id}/plans"
    plan_id = await _hot_set(client, host_id)
    p = await _until(client, host_id, plan_id, "ready", "failed")
    sent = next(c for c in agent.commands if c.WhichOneof("kind") == "make_plan")
    assert sent.make_plan.hot_set and sent.make_plan.seconds == 2 and sent.make_plan.digest == ""
    assert p["state"] == "ready", p["error"]
    # The first function laid out is the plan's root, found in the target's catalog.
    first = f"srv_fn_{HOT_SET_FIRST}"
    assert (p["root_name"], p["root_digest"], p["root_function_index"]) == (first, digest, HOT_SET_FIRST)
    assert p["hot_set"] and len(p["members"]) == len(FIXTURE["group"]) and p["members"][0] == first
    listed = (await client.get(base, params={"target": TARGET})).json()
    assert listed[0]["hot_set"] and len(listed[0]["members"]) == len(FIXTURE["group"])
    async with approver:
        assert (await client.post(f"{base}/{plan_id}/request")).status_code == 200
        r = await approver.post(f"{base}/{plan_id}/approve")
        assert r.status_code == 200 and r.json()["approved_code_sha256"] == FIXTURE["code"]["sha256"], r.text
    r = await client.post(f"{base}/{plan_id}/install", json={"window_s": 1})
    assert r.status_code == 200, r.text

    async def window(which):
        mid = (await _plan(client, host_id, plan_id))[f"{which}_measurement"]
        return mid if mid in agent.measurements else None

    before = await wait_until(lambda: window("before"))
    started = next(c for c in agent.commands if c.WhichOneof("kind") == "start_measurement")
    assert started.start_measurement.resources[0].function_index == HOT_SET_FIRST, "the windows measure the root"
    seq = await agent.send_measurement(before, time.time_ns() - 10**9, [(0, 1000, 4e6)])
    await wait_for_ack(agent, seq)
    p = await _until(client, host_id, plan_id, "installed", "install_failed")
    assert p["state"] == "installed", p["error"]
    sent = next(c for c in agent.commands if c.WhichOneof("kind") == "install_plan")
    assert json.loads(sent.install_plan.plan_json)["options"]["hot_set"] is True
    after = await wait_until(lambda: window("after"))
    seq = await agent.send_measurement(after, time.time_ns() - 10**9, [(0, 1100, 4e6)])
    await wait_for_ack(agent, seq)

    async def compared():
        c = (await _plan(client, host_id, plan_id))["comparison"]
        return c if c and c["after"] and c["after"]["calls"] == 1100 else None

    assert (await wait_until(compared))["before"]["calls"] == 1000
    assert (await client.post(f"{base}/{plan_id}/revert")).status_code == 200
    p = await _until(client, host_id, plan_id, "reverted")
    assert agent.installed == {}
    trail = [a["action"] for a in (await client.get(f"{base}/{plan_id}/audit")).json()]
    assert trail[:2] == ["plan_create", "plan_ready"] and "plan_reverted" in trail
    await agent.close()


async def test_hot_set_requests_that_may_not_be_made_are_refused(backend, client, unique):
    host_id = f"hotset-no-{unique}"
    other = f"hotset-other-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    agent2 = await backend.agent(other, kernel_tag=f"k-{other}")
    await agent2.connect()
    assert (await client.post(f"/api/v1/hosts/{other}/targets", json={"pid": 5151})).status_code == 202
    elsewhere = agent2.target_for(5151).id

    async def attached():
        r = await client.get(f"/api/v1/hosts/{other}/targets")
        return any(t["id"] == elsewhere for t in r.json())

    await wait_until(attached)
    base = f"/api/v1/hosts/{host_id}/plans"
    asked = len(agent.commands)
    r = await client.post(base, json={"target": "kernel", "hot_set": True, "seconds": 2})
    assert r.status_code == 422 and "kernel" in r.text, r.text
    for bad in ({"seconds": 0}, {"seconds": 121}, {"function_index": 1, "digest": digest}, {"function_id": 1}):
        r = await client.post(base, json={"target": TARGET, "hot_set": True, "seconds": 2, **bad})
        assert r.status_code == 422, (bad, r.text)
    r = await client.post(base, json={"target": TARGET, "hot_set": True, "seconds": 2, "measurement_id": "m1"})
    assert r.status_code == 422
    r = await client.post(base, json={"target": TARGET, "hot_set": True, "seconds": 2, "digest": "0" * 64})
    assert r.status_code == 404 and "module" in r.text
    # Another host's target, asked of this host, and the other host's agent asked nothing either.
    r = await client.post(base, json={"target": elsewhere, "hot_set": True, "seconds": 2})
    assert r.status_code == 404 and "Target not found" in r.text, r.text
    assert not [c for c in agent2.commands if c.WhichOneof("kind") == "make_plan"]
    await agent2.close()
    viewer = _client_as(backend, await token_for(backend.base_url, *await make_user(client, "viewer", unique)))
    async with viewer:
        r = await viewer.post(base, json={"target": TARGET, "hot_set": True, "seconds": 2})
        assert r.status_code == 403
    assert not [c for c in agent.commands[asked:] if c.WhichOneof("kind") == "make_plan"], "nothing reached the agent"
    await agent.close()


async def test_an_agent_answering_the_other_kind_of_plan_is_refused(backend, client, unique):
    host_id = f"hotset-lie-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)

    def root_plan(plan):
        plan["options"].pop("hot_set", None)
        return None

    agent.plan_edit = root_plan
    plan_id = await _hot_set(client, host_id)
    p = await _until(client, host_id, plan_id, "failed", "ready")
    assert p["state"] == "failed" and "not of the hot set" in p["error"], p["error"]
    assert p["body_etag"] is None and p["code_sha256"] is None

    def hot_plan(plan):
        plan["options"]["hot_set"] = True
        return None

    agent.plan_edit = hot_plan
    r = await client.post(
        f"/api/v1/hosts/{host_id}/plans", json={"target": TARGET, "digest": digest, "function_index": 2}
    )
    p = await _until(client, host_id, r.json()["id"], "failed", "ready")
    assert p["state"] == "failed" and "of a hot set" in p["error"], p["error"]

    def elsewhere(plan):
        plan["root"] = plan["group"][0]["function"] = "not_in_the_catalog"
        return None

    agent.plan_edit = elsewhere
    plan_id = await _hot_set(client, host_id)
    p = await _until(client, host_id, plan_id, "failed", "ready")
    assert p["state"] == "failed", p
    await agent.close()
