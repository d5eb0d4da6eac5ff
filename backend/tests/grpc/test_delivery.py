# SPDX-License-Identifier: Apache-2.0
"""No silent loss and no poisoned time axis, driven by a fake agent (tests.scripted_agent): numbered
batches are acknowledged once stored and stored once however often they are resent; numbers that
never arrive and gaps the agent reports are recorded and shown on the host's timeline; a batch
stamped outside [now - retention, now + skew] is refused, recorded, and flags the host's clock
without hiding the host's real data."""

import time

from app.protocol.proto import pb
from tests.scripted_agent import wait_catalog_complete, wait_for_ack

NS = 10**9


async def _ready(backend, client, host_id, **kwargs):
    agent = await backend.agent(host_id, kernel_tag=f"d-{host_id}", **kwargs)
    await agent.connect()

    await wait_catalog_complete(client, host_id)
    return agent


async def test_batches_are_acknowledged_once_stored_and_resends_are_stored_once(backend, client, unique):
    host_id = f"ack-{unique}"
    agent = await _ready(backend, client, host_id)
    start = time.time_ns() - 10 * NS
    for i in range(3):
        await agent.send_metrics(start + i * NS, [("vmlinux", 0, 0, 2)])
    await wait_for_ack(agent, 3)
    assert await backend.scalar("SELECT count(*) FROM sample_intervals WHERE host_id = :h", h=host_id) == 3
    await agent.close()

    # The same run of the agent reconnects (its instance id is kept) and resends 2 and 3, then 4.
    again = await backend.agent(host_id, kernel_tag=f"d-{host_id}")
    again.instance_id = agent.instance_id
    welcome = await again.connect()
    assert [(a.instance_id, a.seq) for a in welcome.acks] == [(agent.instance_id, 3)]
    for i, seq in ((1, 2), (2, 3), (3, 4)):
        await again.send_metrics(start + i * NS, [("vmlinux", 0, 0, 2)], seq=seq)
    await wait_for_ack(again, 4)
    assert await backend.scalar("SELECT count(*) FROM sample_intervals WHERE host_id = :h", h=host_id) == 4
    assert (
        await backend.scalar(
            "SELECT sum(c) FROM sample_intervals s, unnest(s.counts) AS c WHERE host_id = :h", h=host_id
        )
        == 8
    )
    assert await backend.scalar("SELECT count(*) FROM data_gaps WHERE host_id = :h", h=host_id) == 0
    await again.close()


async def test_numbers_that_never_arrive_and_reported_gaps_are_recorded_and_shown(backend, client, unique):
    host_id = f"gap-{unique}"
    agent = await _ready(backend, client, host_id)
    start = time.time_ns() - 30 * NS
    await agent.send_metrics(start, [("vmlinux", 0, 0, 1)], seq=1)
    await agent.send_metrics(start + 5 * NS, [("vmlinux", 0, 0, 1)], seq=5)  # 2..4 never came
    # The agent reports that 6..9 were dropped (its buffer was full); 10 arrives.
    await agent.write(
        pb.AgentMessage(
            seq=9,
            instance_id=agent.instance_id,
            gap=pb.DataGap(
                first_seq=6,
                messages=4,
                start_unix_ns=start + 6 * NS,
                end_unix_ns=start + 10 * NS,
                reason="the agent's buffer of unacknowledged data was full",
            ),
        )
    )
    await agent.send_metrics(start + 10 * NS, [("vmlinux", 0, 0, 1)], seq=10)
    await wait_for_ack(agent, 10)
    timeline = (await client.get(f"/api/v1/hosts/{host_id}/coverage", params={"window_s": 600})).json()
    gaps = sorted((g["source"], g["messages"], g["reason"]) for g in timeline["gaps"])
    assert gaps == [
        ("agent", 4, "the agent's buffer of unacknowledged data was full"),
        ("backend", 3, "sequence numbers 2..4 never arrived"),
    ]
    covered = sum(b["covered_ms"] for b in timeline["buckets"])
    assert covered == 3 * 1000
    await agent.close()


async def test_batches_from_2262_are_refused_flag_the_clock_and_do_not_hide_real_data(backend, client, unique):
    from app.agents.clock import CLOCK_AHEAD_RUN

    host_id = f"future-{unique}"
    agent = await _ready(backend, client, host_id)
    year_2262 = 9_200_000_000 * NS
    for k in range(CLOCK_AHEAD_RUN):  # a run of batches ahead of our clock: the host's clock is wrong
        await agent.send_metrics(year_2262 + k * NS, [("vmlinux", 3, 0, 50)])
    now = time.time_ns()
    await agent.send_metrics(now - 3 * NS, [("vmlinux", 0, 0, 7)])
    await agent.send_metrics(now - 2 * NS, [("vmlinux", 1, 0, 5)])
    await wait_for_ack(agent, CLOCK_AHEAD_RUN + 2)
    assert (
        await backend.scalar("SELECT count(*) FROM sample_intervals WHERE host_id = :h AND ts > now()", h=host_id) == 0
    )
    top = (await client.get(f"/api/v1/hosts/{host_id}/top-functions", params={"window_s": 60})).json()
    assert [(i["name"], i["samples"]) for i in top["items"]] == [("vfs_read", 7), ("ksys_read", 5)]
    host = (await client.get(f"/api/v1/hosts/{host_id}")).json()
    assert host["clock_skewed"] is True and host["clock_offset_ms"] > 10**12
    assert host["refused_batches"] == CLOCK_AHEAD_RUN
    timeline = (await client.get(f"/api/v1/hosts/{host_id}/coverage")).json()
    assert any("clock is about" in g["reason"] for g in timeline["gaps"])
    await agent.close()


async def test_one_refused_batch_does_not_flag_a_host_whose_hello_clock_is_right(backend, client, unique):
    """A batch 25 hours old (spooled data resent after an outage looks the same) and, on another stream, one
    far ahead among good ones: each is refused, counted and shown as a gap, and neither flags the clock
    that Hello measured right."""
    for host_id, stamp in (
        (f"old-{unique}", time.time_ns() - 25 * 3600 * NS),
        (f"ahead1-{unique}", time.time_ns() + 25 * 3600 * NS),
    ):
        agent = await _ready(backend, client, host_id)
        await agent.send_metrics(stamp, [("vmlinux", 3, 0, 50)])
        await agent.send_metrics(time.time_ns() - 2 * NS, [("vmlinux", 1, 0, 5)])
        await wait_for_ack(agent, 2)
        host = (await client.get(f"/api/v1/hosts/{host_id}")).json()
        assert host["refused_batches"] == 1
        assert host["clock_skewed"] is False and abs(host["clock_offset_ms"]) < 60_000, host
        assert (
            await backend.scalar(
                "SELECT count(*) FROM data_gaps WHERE host_id = :h AND reason LIKE 'refused:%'", h=host_id
            )
            == 1
        )
        await agent.close()


async def test_batches_stamped_1677_and_1970_are_refused(backend, client, unique):
    host_id = f"past-{unique}"
    agent = await _ready(backend, client, host_id)
    await agent.send_metrics(-(2**63) + 1, [("vmlinux", 0, 0, 1)])  # 1677
    await agent.send_metrics(1 * NS, [("vmlinux", 0, 0, 1)])  # 1970
    await agent.send_metrics(time.time_ns() - NS, [("vmlinux", 0, 0, 1)])
    await wait_for_ack(agent, 3)
    assert await backend.scalar("SELECT count(*) FROM sample_intervals WHERE host_id = :h", h=host_id) == 1
    assert await backend.scalar(
        "SELECT min(ts) > now() - interval '1 hour' FROM sample_intervals WHERE host_id = :h", h=host_id
    )
    assert (
        await backend.scalar(
            "SELECT count(*) FROM data_gaps WHERE host_id = :h AND reason LIKE 'refused: the interval is older%'",
            h=host_id,
        )
        == 2
    )
    await agent.close()


async def test_hello_clock_offset_is_reported(backend, client, unique):
    host_id = f"clock-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"d-{host_id}")
    hello = agent.hello()
    hello.clock_unix_ns = time.time_ns() + 3600 * NS
    agent.hello = lambda: hello  # type: ignore[method-assign]
    await agent.connect()
    host = (await client.get(f"/api/v1/hosts/{host_id}")).json()
    assert 3590_000 < host["clock_offset_ms"] < 3610_000
    assert host["clock_skewed"] is True
    await agent.close()
