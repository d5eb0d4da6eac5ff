# SPDX-License-Identifier: Apache-2.0
"""Ingestion after the database refused writes (SQLSTATE 53100, disk full) and accepts them again, with
the real backend, its Postgres and a scripted agent on the real stream: while the database refuses, each
stream that has a batch to store ends with UNAVAILABLE and nothing is acknowledged; once it accepts writes
again, the agent's resent batches and new ones are stored once each and acknowledged, and nothing
acknowledged before is lost. A trigger plays the full disk, on each table a metric batch writes."""

import asyncio
import time

import grpc
import pytest
from sqlalchemy import text

from tests.scripted_agent import wait_catalog_complete, wait_for_ack

NS = 10**9
ENTRY = 7
READ = [("k", 0, 0x4), ("k", 1, 0x18), ("k", 2, 0x14), ("k", ENTRY, 0x20)]
OPEN = [("k", 5, 0x6), ("k", ENTRY, 0x20)]


async def refuse_writes(engine, table: str, host_id: str, on: bool) -> None:
    """Fail this host's inserts into `table` with SQLSTATE 53100 (disk_full), as a full disk does (on),
    or accept them again (off)."""
    name = f"full_{table}_{host_id.replace('-', '_')}"
    async with engine.begin() as conn:
        if on:
            await conn.execute(
                text(f"""
                CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF NEW.host_id = '{host_id}' THEN
                    RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full';
                  END IF;
                  RETURN NEW;
                END $$""")
            )
            await conn.execute(
                text(f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()")
            )
        else:
            await conn.execute(text(f"DROP TRIGGER {name} ON {table}"))
            await conn.execute(text(f"DROP FUNCTION {name}()"))


async def ended(agent) -> grpc.StatusCode | None:
    """Wait until the backend ends the agent's stream; its status code."""
    try:
        await asyncio.wait_for(agent._reader, 60)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return None


@pytest.mark.parametrize("table", ["sample_intervals", "stack_samples", "stack_defs"])
async def test_batches_refused_by_a_full_disk_are_stored_once_after_it_accepts_writes(backend, client, unique, table):
    host_id = f"full-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"full-{unique}")
    await agent.connect()
    await wait_catalog_complete(client, host_id)
    # Two minutes back, as resent batches are after an outage: below the rollups' watermark.
    start = time.time_ns() // NS * NS - 120 * NS

    def batch(i: int, defs: bool = True):
        # A new stack in every batch, so each writes a definition too.
        fresh = [("k", 10 + i, 0x2), ("k", ENTRY, 0x20)]
        samples = [(READ, 100, "dd", 0, 10), (OPEN, 200, "cat", 1, 3), (fresh, 300, "ls", 0, 1 + i)]
        return agent.stack_batch(start + i * NS, samples, define=None if defs else set())

    await agent.send_batch(batch(0))
    await wait_for_ack(agent, 1)

    engine = backend.runtime.engine
    await refuse_writes(engine, table, host_id, True)
    try:
        # The agent reconnects and resends batches 2..5 (four in flight) while the disk is full.
        for attempt in range(3):
            if attempt:
                await agent.close()
                agent.acks.clear()
                await agent.connect()
            for i in range(1, 5):
                await agent.send_batch(batch(i), seq=i + 1)
            assert await ended(agent) == grpc.StatusCode.UNAVAILABLE
            assert not [a for a in agent.acks if a.seq > 1]
    finally:
        await refuse_writes(engine, table, host_id, False)

    await agent.close()
    welcome = await agent.connect()
    assert [(a.instance_id, a.seq) for a in welcome.acks] == [(agent.instance_id, 1)]
    for i in range(1, 5):
        await agent.send_batch(batch(i), seq=i + 1)
    agent.seq = 5
    await agent.send_batch(batch(5))
    await wait_for_ack(agent, 6, timeout=60)
    assert await backend.scalar("SELECT count(*) FROM sample_intervals WHERE host_id = :h", h=host_id) == 6
    assert await backend.scalar("SELECT count(*) FROM stack_samples WHERE host_id = :h", h=host_id) == 18
    assert await backend.scalar("SELECT count(*) FROM stack_defs WHERE host_id = :h", h=host_id) == 8
    total = "SELECT sum(total_samples) FROM sample_intervals WHERE host_id = :h"
    assert await backend.scalar(total, h=host_id) == sum(14 + i for i in range(6))
    assert await backend.scalar("SELECT count(*) FROM data_gaps WHERE host_id = :h", h=host_id) == 0
    assert not agent._reader.done()  # the stream goes on
    await agent.close()


async def test_a_full_disk_is_logged_with_its_reason_and_shown_while_it_lasts(backend, client, anon, unique, caplog):
    """The first refused commit logs an error naming the database's reason (SQLSTATE 53100), /metrics shows
    hotpath_ingest_failing 1 until a commit stores data again, which logs how long it failed."""
    from tests.api.test_metrics import _value

    host_id = f"fullog-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"fullog-{unique}")
    await agent.connect()
    await wait_catalog_complete(client, host_id)
    start = time.time_ns() // NS * NS - 30 * NS
    engine = backend.runtime.engine
    caplog.set_level("INFO", logger="hotpath.ingest")
    await refuse_writes(engine, "sample_intervals", host_id, True)
    try:
        await agent.send_metrics(start, [("vmlinux", 0, 0, 2)], seq=1)
        assert await ended(agent) == grpc.StatusCode.UNAVAILABLE
        errors = [r.getMessage() for r in caplog.records if r.name == "hotpath.ingest" and r.levelname == "ERROR"]
        assert len(errors) == 1, errors
        assert "DiskFull, SQLSTATE 53100: could not extend file: No space left on device" in errors[0]
        metrics = (await anon.get("/metrics")).text
        assert _value(metrics, "hotpath_ingest_failing") == 1
        assert _value(metrics, "hotpath_ingest_failed_commits_total") >= 1
    finally:
        await refuse_writes(engine, "sample_intervals", host_id, False)
    await agent.close()
    await agent.connect()
    await agent.send_metrics(start, [("vmlinux", 0, 0, 2)], seq=1)
    await wait_for_ack(agent, 1)
    assert any("storing the agents' data again, after" in r.getMessage() for r in caplog.records)
    assert _value((await anon.get("/metrics")).text, "hotpath_ingest_failing") == 0
    await agent.close()
