# SPDX-License-Identifier: Apache-2.0
"""A plan's record and its body through the real backend with the scripted agent (tests.scripted_agent).

Proven here: the polled record (GET .../plans/{id}, every step's answer) does not carry the body, so its
size follows from what it does carry (the members' names and fixed fields), not from the plan's size; the
body (GET .../plans/{id}/body) is served whole with an entity tag that a revalidation gets 304 for, and
is refused, as the record is, without a signed-in user or for a plan of another host; malformed
If-None-Match headers get the body; an unknown plan is 404 and a plan still being made 409; the install
carries what the agent's installer reads, without the listing, heatmaps or profile."""

import asyncio
import json
import uuid

import httpx

from tests.conftest import make_user, token_for
from tests.grpc.test_plans import FIXTURE, _approved, _client_as, _host_with_process, _make, _until

# The record's fields other than its members and comparisons, with their longest values (ids, hashes,
# timestamps, options, the make command's id): far below this in JSON.
RECORD_FIXED = 4096


async def test_the_record_stays_small_and_the_body_is_served_once_with_its_tag(backend, client, unique):
    host_id = f"body-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    settings = backend.runtime.settings
    filler = settings.max_plan_bytes - len(json.dumps(FIXTURE)) - 4096

    def pad(plan):  # a large plan: most of 16 MiB in a field the console shows (the code's listing)
        plan["code"]["listing"] = plan["code"]["listing"] * (filler // len(json.dumps(plan["code"]["listing"])))
        return None

    agent.plan_edit = pad
    ap_user = await make_user(client, "approver", unique)
    base = f"/api/v1/hosts/{host_id}/plans"
    async with _client_as(backend, await token_for(backend.base_url, *ap_user)) as approver:
        plan_id = await _approved(client, approver, host_id, digest, 2)
        r = await client.get(f"{base}/{plan_id}")
        record = r.json()
        assert record["state"] == "approved" and "plan" not in record
        members = json.dumps(record["members"])
        assert len(r.content) <= len(members) + RECORD_FIXED, r.text[:2000]

        body = await client.get(f"{base}/{plan_id}/body")
        assert body.status_code == 200 and body.headers["etag"] == record["body_etag"]
        assert len(body.content) > (settings.max_plan_bytes * 3) // 4, len(body.content)
        assert len(r.content) * 1000 < len(body.content)
        assert "immutable" in body.headers["cache-control"]
        plan = body.json()
        assert plan["code"]["sha256"] == record["code_sha256"] == FIXTURE["code"]["sha256"]
        assert [g["function"] for g in plan["group"]] == record["members"]

        # Revalidation: 304 with no body, for the tag alone, in a list, or weak.
        tag = record["body_etag"]
        for inm in (tag, f'"x", {tag}', f"W/{tag}", "*"):
            again = await client.get(f"{base}/{plan_id}/body", headers={"If-None-Match": inm})
            assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag, inm
        # Malformed or other tags: the body.
        for inm in ('"other"', tag[1:-1], "W/", ",,,", '"' + tag, tag + "x"):
            again = await client.get(f"{base}/{plan_id}/body", headers={"If-None-Match": inm})
            assert again.status_code == 200 and len(again.content) == len(body.content), inm

        # Every step's answer is the record too: the install's and the revert's.
        agent.plan_edit = None
        r = await client.post(f"{base}/{plan_id}/install", json={"window_s": 1})
        assert r.status_code == 200 and "plan" not in r.json() and len(r.content) <= len(members) + RECORD_FIXED
        p = await _until(client, host_id, plan_id, "installed", "install_failed")
        assert p["state"] == "installed", p["error"]
        sent = next(
            c for c in agent.commands if c.WhichOneof("kind") == "install_plan" and c.install_plan.plan_id == plan_id
        )
        carried = json.loads(sent.install_plan.plan_json)
        assert sent.install_plan.approved_code_sha256 == record["code_sha256"]
        assert carried["code"]["hex"] == plan["code"]["hex"] and carried["code"]["sha256"] == plan["code"]["sha256"]
        for gone in ("icache_before", "icache_after", "profile", "totals", "kept_in_place"):
            assert gone not in carried, gone
        assert "listing" not in carried["code"]
        assert all("chain_table" not in g and "edge_counts" not in g for g in carried["group"])
        assert len(sent.install_plan.plan_json) < len(json.dumps(FIXTURE))
        # The body did not change with the install: the same tag, still 304.
        assert (await client.get(f"{base}/{plan_id}")).json()["body_etag"] == tag
        again = await client.get(f"{base}/{plan_id}/body", headers={"If-None-Match": tag})
        assert again.status_code == 304
    await agent.close()


async def test_the_body_is_read_as_the_record_is_and_not_before_it_exists(backend, client, unique):
    host_id = f"body-auth-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    other, _ = await _host_with_process(backend, client, f"body-other-{unique}")
    base = f"/api/v1/hosts/{host_id}/plans"
    # Held: the agent reports progress and does not answer, so the plan stays planning.
    agent.hold = asyncio.Event()
    plan_id = await _make(client, host_id, digest)
    r = await client.get(f"{base}/{plan_id}/body")
    assert r.status_code == 409 and "still being made" in r.json()["detail"], r.text
    assert (await client.get(f"{base}/{plan_id}")).json()["body_etag"] is None
    agent.hold.set()
    p = await _until(client, host_id, plan_id, "ready", "failed")
    assert p["state"] == "ready" and p["body_etag"]

    # An unknown plan, a plan of this host asked of another host, a malformed id.
    assert (await client.get(f"{base}/{uuid.uuid4()}/body")).status_code == 404
    assert (await client.get(f"/api/v1/hosts/body-other-{unique}/plans/{plan_id}/body")).status_code == 404
    assert (await client.get(f"/api/v1/hosts/nohost-{unique}/plans/{plan_id}/body")).status_code == 404
    assert (await client.get(f"{base}/not-a-plan/body")).status_code == 422
    # Not signed in, or with a forged token: refused, with nothing of the plan.
    async with httpx.AsyncClient(base_url=backend.base_url, timeout=30) as anon:
        r = await anon.get(f"{base}/{plan_id}/body")
        assert r.status_code == 401 and "group" not in r.text
        r = await anon.get(f"{base}/{plan_id}/body", headers={"Authorization": "Bearer x.y.z"})
        assert r.status_code == 401 and "group" not in r.text
    # Any signed-in user reads it, as the record (a viewer).
    viewer = await make_user(client, "viewer", unique)
    async with _client_as(backend, await token_for(backend.base_url, *viewer)) as v:
        r = await v.get(f"{base}/{plan_id}/body")
        assert r.status_code == 200 and r.json()["root"] == "srv_fn_2"

    # A plan that failed before the agent's plan was stored has no body: 404 saying so.
    agent.plan_edit = lambda plan: "{not json"
    failed = await _make(client, host_id, digest)
    await _until(client, host_id, failed, "failed")
    r = await client.get(f"{base}/{failed}/body")
    assert r.status_code == 404 and "no body" in r.json()["detail"], r.text
    await agent.close()
    await other.close()
