# SPDX-License-Identifier: Apache-2.0
"""A measurement interval the backend refuses for its content is refused alone: it is acknowledged (so
the agent does not resend it after every reconnect), nothing of it is stored, the refusal is counted on
the measurement and recorded as a data gap with its reason, and the stream goes on: the host stays
online and the next, consistent interval is stored. Real backend and Postgres, a scripted agent on the
real stream."""

import time

from app.protocol.proto import pb
from tests.grpc.test_commands import _measure, _online
from tests.grpc.test_measured_edges import VALUES, _edges
from tests.scripted_agent import wait_for_ack


async def test_a_non_conserving_interval_is_refused_acknowledged_and_the_host_stays_online(backend, client, unique):
    host_id = f"flow-{unique}"
    agent = await _online(backend, client, host_id)
    vmlinux = next(d for n, _b, _f, d in agent.modules if n == "vmlinux")
    mid = await _measure(client, host_id, agent, [{"digest": vmlinux, "function_index": 0, "blocks": True}])
    now = time.time_ns() // 10**9 * 10**9
    # Block 0x20 counted 22 while its edges say 100 went through it: what the e2e run's agent sent.
    bad = [(0, 100, 0), (1, 100, 0), (2, 40, 0), (3, 22, 0)]
    first = await agent.send_measurement(mid, now - 3 * 10**9, bad, edges=_edges())
    await wait_for_ack(agent, first)
    assert not agent._reader.done()  # the stream goes on
    host = (await client.get(f"/api/v1/hosts/{host_id}")).json()
    assert host["online"] is True
    m = (await client.get(f"/api/v1/hosts/{host_id}/measurements/{mid}")).json()
    assert m["refused_intervals"] == 1 and "flow is not conserved at block 0x20 of row 0" in m["refusal"]
    assert await backend.scalar("SELECT count(*) FROM measurement_points WHERE measurement_id = :m", m=mid) == 0
    reasons = await backend.scalar("SELECT string_agg(reason, '|') FROM data_gaps WHERE host_id = :h", h=host_id)
    assert "refused: " in reasons and "not conserved" in reasons
    # A resend of the refused batch (a reconnecting agent) is acknowledged as stored before, not counted again.
    await agent.send_measurement(mid, now - 3 * 10**9, bad, edges=_edges(), seq=first)
    nxt = await agent.send_measurement(mid, now - 2 * 10**9, VALUES, edges=_edges())
    await wait_for_ack(agent, nxt)
    assert await backend.scalar("SELECT count(*) FROM measurement_points WHERE measurement_id = :m", m=mid) == 1
    m = (await client.get(f"/api/v1/hosts/{host_id}/measurements/{mid}")).json()
    assert m["refused_intervals"] == 1 and m["state"] == "running"
    await agent.close()


async def test_a_batch_with_values_for_a_row_it_lacks_is_refused_alone(backend, client, unique):
    host_id = f"rowx-{unique}"
    agent = await _online(backend, client, host_id)
    vmlinux = next(d for n, _b, _f, d in agent.modules if n == "vmlinux")
    mid = await _measure(client, host_id, agent, [{"digest": vmlinux, "function_index": 1}])
    seq = await agent.send_measurement(mid, time.time_ns() - 2 * 10**9, [(7, 3, 0)], state=pb.MEASUREMENT_STATE_RUNNING)
    await wait_for_ack(agent, seq)
    assert not agent._reader.done()
    m = (await client.get(f"/api/v1/hosts/{host_id}/measurements/{mid}")).json()
    assert m["refused_intervals"] == 1 and m["refusal"]
    assert await backend.scalar("SELECT count(*) FROM measurement_points WHERE measurement_id = :m", m=mid) == 0
    await agent.close()
