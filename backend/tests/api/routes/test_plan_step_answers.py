# SPDX-License-Identifier: Apache-2.0
"""A plan step's answer (request here; approve, reject, install and revert build theirs the same way) is
the whole PlanDetail its route documents, as GET gives it: the schema-driven fuzzer once found a request's
answer without the `comparison` the schema requires."""

from app.api.schemas.plans import PlanDetail
from tests.grpc.test_plans import TARGET, _host_with_process, _until


async def test_a_request_answers_the_whole_plan_detail(backend, client, unique):
    host_id = f"step-{unique}"
    agent, digest = await _host_with_process(backend, client, host_id)
    r = await client.post(
        f"/api/v1/hosts/{host_id}/plans", json={"target": TARGET, "digest": digest, "function_index": 2, "seconds": 1}
    )
    assert r.status_code == 202, r.text
    plan = await _until(client, host_id, r.json()["id"], "ready", "failed")
    assert plan["state"] == "ready", plan["error"]
    requested = await client.post(f"/api/v1/hosts/{host_id}/plans/{plan['id']}/request")
    assert requested.status_code == 200, requested.text
    answer = requested.json()
    PlanDetail.model_validate(answer)  # raises on a field the schema requires and the answer lacks
    got = (await client.get(f"/api/v1/hosts/{host_id}/plans/{plan['id']}")).json()
    assert answer.keys() == got.keys() and answer["state"] == got["state"] == "requested"
    await agent.close()
