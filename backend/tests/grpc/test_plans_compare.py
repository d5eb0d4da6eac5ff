# SPDX-License-Identifier: Apache-2.0
"""The interleaved before/after of installed plans and the guarded install (issue 17 item 5), through the
real backend with the fake agent (tests.scripted_agent), which answers ComparePlan in the contract's shape
from scripted per-window counts and always with a forged summary ("faster", -50%).

Proven here: the backend's summary is computed from the windows, not the agent's; a guarded install
keeps a plan within noise and the system reverts a slower one, auditing the figures; an answer whose
windows do not hold together is refused and recorded as failed; comparing again needs the installing
role and an installed plan, one comparison at a time, with its progress shown while it runs."""

import asyncio

from tests.conftest import make_user, token_for
from tests.grpc.test_plans import TARGET, _approved, _client_as, _host_with_process, _plan, _until
from tests.scripted_agent import COMPARE_SLOWER, wait_until

GUARD = {"window_s": 1, "guard_pairs": 3, "guard_window_seconds": 0.2}


async def _setup(backend, client, unique, host_id):
    agent, digest = await _host_with_process(backend, client, host_id)
    ap_user = await make_user(client, "approver", unique)
    approver = _client_as(backend, await token_for(backend.base_url, *ap_user))
    return agent, digest, approver, f"/api/v1/hosts/{host_id}/plans"


async def _compared(client, host_id, plan_id, n=1):
    """The plan once its n-th comparison ended."""

    async def ended():
        p = await _plan(client, host_id, plan_id)
        c = p["interleaved"]
        trail = (await client.get(f"/api/v1/hosts/{host_id}/plans/{plan_id}/audit")).json()
        asked = sum(a["action"] == "plan_compare_requested" for a in trail)
        return p if c and c["state"] != "running" and asked == n else None

    return await wait_until(ended)


def _sent(agent, kind):
    return [c for c in agent.commands if c.WhichOneof("kind") == kind]


async def test_a_guarded_install_keeps_a_plan_within_noise_and_the_agents_summary_is_not_used(backend, client, unique):
    host_id = f"guard-keep-{unique}"
    agent, digest, approver, base = await _setup(backend, client, unique, host_id)
    async with approver:
        plan_id = await _approved(client, approver, host_id, digest, 2)
        r = await client.post(f"{base}/{plan_id}/install", json=GUARD)
        assert r.status_code == 200 and r.json()["state"] == "installing", r.text
        p = await _compared(client, host_id, plan_id)
    c = p["interleaved"]
    assert c["state"] == "done" and c["guard"] and c["guard_action"] == "kept", c
    # The fake's windows: shares 0.200/0.201, 0.205/0.203, 0.198/0.199 (differences +1, -2, +1 of 1000);
    # its summary says "faster" by 50%, which the backend does not read.
    s = c["summary"]
    assert s["verdict"] == "within_noise" and s["pairs_used"] == 3
    assert abs(s["share_original"] - 0.201) < 1e-9 and abs(s["change"]) < 1e-9
    assert s["interval"][0] < 0 < s["interval"][1]
    assert [(x["pair"], x["original"], x["installed"]) for x in c["pair_shares"]] == [
        (0, 0.2, 0.201),
        (1, 0.205, 0.203),
        (2, 0.198, 0.199),
    ]
    arms = [w["arm"] for w in c["windows"]]
    assert arms == ["original", "installed", "installed", "original", "original", "installed"]
    assert c["guard_reason"].startswith("guard: the plan's code took +0.0% of the samples (95% interval -")
    assert c["guard_reason"].endswith("; kept installed")
    sent = _sent(agent, "compare_plan")
    assert len(sent) == 1 and sent[0].compare_plan.plan_id == plan_id and sent[0].compare_plan.pairs == 3
    assert abs(sent[0].compare_plan.window_seconds - 0.2) < 1e-9 and sent[0].compare_plan.target == TARGET
    p = await _until(client, host_id, plan_id, "installed")
    assert agent.installed.get(plan_id), "within noise: the plan stays installed"
    await wait_until(lambda: _plan_after_window(client, host_id, plan_id))
    trail = (await client.get(f"{base}/{plan_id}/audit")).json()
    steps = [(a["action"], a["actor"]) for a in trail]
    assert ("plan_compare_requested", "admin") in steps and ("plan_compared", f"agent:{host_id}") in steps
    guard = next(a for a in trail if a["action"] == "plan_guard_kept")
    assert guard["actor"] == "system" and guard["detail"]["verdict"] == "within_noise"
    assert guard["detail"]["reason"] == c["guard_reason"]
    await agent.close()


async def _plan_after_window(client, host_id, plan_id):
    return (await _plan(client, host_id, plan_id))["after_measurement"]


async def test_the_guard_reverts_a_slower_plan_as_the_system_with_the_figures(backend, client, unique):
    host_id = f"guard-revert-{unique}"
    agent, digest, approver, base = await _setup(backend, client, unique, host_id)
    agent.compare_in_plan = list(COMPARE_SLOWER)
    async with approver:
        plan_id = await _approved(client, approver, host_id, digest, 2)
        assert (await client.post(f"{base}/{plan_id}/install", json=GUARD)).status_code == 200
        p = await _until(client, host_id, plan_id, "reverted")
    c = p["interleaved"]
    # Shares 0.200/0.221, 0.204/0.224, 0.198/0.220: the plan's code took ~10.5% more of the samples.
    assert c["summary"]["verdict"] == "slower" and c["summary"]["interval"][0] > 0
    assert c["guard_action"] == "reverted"
    assert c["guard_reason"].startswith("guard: the plan's code took +10.5% of the samples (95% interval +")
    assert c["guard_reason"].endswith("); reverted")
    assert p["revert_by"] == "system" and agent.installed == {}
    assert p["after_measurement"] is None, "a reverted plan has no window after"
    trail = (await client.get(f"{base}/{plan_id}/audit")).json()
    guard = next(a for a in trail if a["action"] == "plan_guard_reverted")
    assert guard["actor"] == "system" and guard["detail"]["reason"] == c["guard_reason"]
    assert guard["detail"]["change"] > 0 and guard["detail"]["interval"][0] > 0
    revert = next(a for a in trail if a["action"] == "plan_revert_requested")
    assert revert["actor"] == "system" and revert["detail"]["reason"] == c["guard_reason"]
    assert ("plan_reverted", f"agent:{host_id}") in [(a["action"], a["actor"]) for a in trail]
    await agent.close()


async def test_an_install_without_the_guard_runs_no_comparison(backend, client, unique):
    host_id = f"guard-off-{unique}"
    agent, digest, approver, base = await _setup(backend, client, unique, host_id)
    agent.compare_in_plan = list(COMPARE_SLOWER)
    async with approver:
        plan_id = await _approved(client, approver, host_id, digest, 2)
        assert (await client.post(f"{base}/{plan_id}/install", json={"window_s": 1, "guard": False})).status_code == 200
        await wait_until(lambda: _plan_after_window(client, host_id, plan_id))
    p = await _plan(client, host_id, plan_id)
    assert p["state"] == "installed" and p["interleaved"] is None and not _sent(agent, "compare_plan")
    await agent.close()


async def test_windows_that_do_not_hold_together_are_refused_and_recorded_as_failed(backend, client, unique):
    host_id = f"cmp-lie-{unique}"
    agent, digest, approver, base = await _setup(backend, client, unique, host_id)

    def lie(detail):
        detail["windows"][1]["samples_in_plan"] = detail["windows"][1]["samples"] + 1

    agent.compare_edit = lie
    async with approver:
        plan_id = await _approved(client, approver, host_id, digest, 2)
        assert (await client.post(f"{base}/{plan_id}/install", json=GUARD)).status_code == 200
        p = await _compared(client, host_id, plan_id)
    c = p["interleaved"]
    assert c["state"] == "failed" and c["summary"] is None and c["windows"] == []
    assert "refused" in c["error"] and "1001 samples in the plan's code of 1000" in c["error"], c["error"]
    assert c["guard_action"] == "kept" and c["guard_reason"].startswith("guard: no comparison (")
    cmd = (await client.get(f"/api/v1/hosts/{host_id}/commands/{c['command_id']}")).json()
    assert cmd["state"] == "failed" and "refused" in cmd["error"]
    assert (await _until(client, host_id, plan_id, "installed"))["state"] == "installed"
    trail = (await client.get(f"{base}/{plan_id}/audit")).json()
    failed = next(a for a in trail if a["action"] == "plan_compare_failed")
    assert failed["actor"] == "system" and "refused" in failed["detail"]["reason"]
    assert not any(a["action"] == "plan_compared" for a in trail)
    await agent.close()


async def test_compare_again_needs_the_installing_role_and_an_installed_plan_one_at_a_time(backend, client, unique):
    host_id = f"cmp-again-{unique}"
    agent, digest, approver, base = await _setup(backend, client, unique, host_id)
    viewer = _client_as(backend, await token_for(backend.base_url, *await make_user(client, "viewer", unique)))
    operator = _client_as(backend, await token_for(backend.base_url, *await make_user(client, "operator", unique)))
    async with approver, viewer, operator:
        plan_id = await _approved(client, approver, host_id, digest, 2)
        r = await operator.post(f"{base}/{plan_id}/compare", json={})
        assert r.status_code == 409 and "approved" in r.json()["detail"], "an approved plan is not installed"
        assert (await operator.post(f"{base}/{plan_id}/install", json={**GUARD, "guard": False})).status_code == 200
        await _until(client, host_id, plan_id, "installed")
        assert (await viewer.post(f"{base}/{plan_id}/compare", json={})).status_code == 403
        assert (await operator.post(f"{base}/{plan_id}/compare", json={"pairs": 1})).status_code == 422
        # The fake agent holds the command at its first progress: the comparison shows as running.
        agent.compare_in_plan = list(COMPARE_SLOWER)
        agent.hold = asyncio.Event()
        r = await operator.post(f"{base}/{plan_id}/compare", json={"pairs": 4, "window_seconds": 0.5})
        assert r.status_code == 200 and r.json()["interleaved"]["state"] == "running", r.text
        assert r.json()["interleaved"]["guard"] is False

        async def progressing():
            c = (await _plan(client, host_id, plan_id))["interleaved"]
            return c if c["progress"] == 0.5 else None

        c = await wait_until(progressing)
        assert c["message"] == "halfway" and c["requested_by"] != "admin"
        r = await operator.post(f"{base}/{plan_id}/compare", json={})
        assert r.status_code == 409 and "running" in r.json()["detail"]
        agent.hold.set()
        p = await _compared(client, host_id, plan_id)
        c = p["interleaved"]
        assert c["summary"]["verdict"] == "slower" and c["pairs"] == 4 and len(c["windows"]) == 8
        assert c["guard_action"] is None and p["state"] == "installed", "compared again: never reverted"
        assert agent.installed.get(plan_id)
        assert (await operator.post(f"{base}/{plan_id}/revert")).status_code == 200
        await _until(client, host_id, plan_id, "reverted")
        r = await operator.post(f"{base}/{plan_id}/compare", json={})
        assert r.status_code == 409 and "reverted" in r.json()["detail"]
    assert len(_sent(agent, "compare_plan")) == 1
    await agent.close()


async def test_a_comparison_whose_agent_went_away_can_be_cancelled_and_compared_again(backend, client, unique):
    """A ComparePlan sent to an agent that then went away stays running until the agent returns; its
    cancel ends it at once (the agent's Hello settles the plan's state when it returns, and the cancel
    still reaches the agent then), so 'Compare again' is not held by a host that may never come back."""
    host_id = f"cmp-away-{unique}"
    agent, digest, approver, base = await _setup(backend, client, unique, host_id)
    async with approver:
        plan_id = await _approved(client, approver, host_id, digest, 2)
        assert (await client.post(f"{base}/{plan_id}/install", json={**GUARD, "guard": False})).status_code == 200
        await _until(client, host_id, plan_id, "installed")
        agent.hold = asyncio.Event()
        r = await client.post(f"{base}/{plan_id}/compare", json={"pairs": 2, "window_seconds": 0.2})
        assert r.status_code == 200, r.text
        c = await wait_until(
            lambda: _running_with_progress(client, host_id, plan_id),
        )
        await agent.close()

        async def offline():
            return (await client.get(f"/api/v1/hosts/{host_id}")).json()["online"] is False or None

        await wait_until(offline)
        r = await client.post(f"{base}/{plan_id}/compare", json={})
        assert r.status_code == 409 and "running" in r.json()["detail"], "held while the agent is away"
        r = await client.post(f"/api/v1/hosts/{host_id}/commands/{c['command_id']}/cancel")
        assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
        assert r.json()["error"] == "cancelled while the host's agent was away"
        p = await _plan(client, host_id, plan_id)
        assert p["interleaved"]["state"] == "failed" and "away" in p["interleaved"]["error"]
        assert p["state"] == "installed", "the plan's state waits for the agent's Hello"
        cmds = (await client.get(f"/api/v1/hosts/{host_id}/commands")).json()
        cancels = [x for x in cmds if x["kind"] == "cancel" and x["params"]["command_id"] == c["command_id"]]
        assert len(cancels) == 1 and cancels[0]["state"] == "queued", "the agent is told when it returns"
        r = await client.post(f"{base}/{plan_id}/compare", json={})
        assert r.status_code == 200 and r.json()["interleaved"]["state"] == "running", r.text
        trail = (await client.get(f"{base}/{plan_id}/audit")).json()
        assert any(a["action"] == "plan_compare_failed" and "away" in a["detail"]["reason"] for a in trail)


async def _running_with_progress(client, host_id, plan_id):
    c = (await _plan(client, host_id, plan_id))["interleaved"]
    return c if c and c["state"] == "running" and c["progress"] == 0.5 else None
