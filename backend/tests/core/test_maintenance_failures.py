# SPDX-License-Identifier: Apache-2.0
"""The series' background upkeep when the database refuses writes (SQLSTATE 53100, a full disk): the
retention pass still drops expired partitions when creating the ones ahead fails (dropping is what frees
the space), and the retention and rollup loops log the database's reason, survive and run again."""

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app import server
from app.storage import samples
from app.storage.series.partitions import HOUR, existing, partition_name
from tests.scripted_agent import wait_until

FULL = "RAISE EXCEPTION 'could not create file: No space left on device' USING ERRCODE = 'disk_full'"


def _hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


async def test_expired_partitions_are_dropped_while_creating_partitions_fails(backend, caplog):
    engine = backend.runtime.engine
    async with engine.connect() as conn:
        if not (await conn.execute(text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"))).scalar_one():
            pytest.skip("an event trigger (the full disk for CREATE TABLE) needs a superuser")
    now = datetime.now(UTC)
    old = _hour(now - timedelta(days=3))
    old_name = partition_name("measurement_points", old, HOUR)
    ahead = _hour(now + timedelta(hours=2))
    ahead_name = partition_name("measurement_points", ahead, HOUR)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                f"CREATE TABLE IF NOT EXISTS {old_name} PARTITION OF measurement_points "
                f"FOR VALUES FROM ('{old.isoformat()}') TO ('{(old + HOUR).isoformat()}')"
            )
        )
        # A partition the pass must create (none of the tests stores data two hours ahead).
        assert (await conn.execute(text(f"SELECT count(*) FROM {ahead_name}"))).scalar_one() == 0
        await conn.execute(text(f"DROP TABLE {ahead_name}"))
        await conn.execute(
            text(f"CREATE FUNCTION disk_full_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN {FULL}; END $$")
        )
        await conn.execute(
            text(
                "CREATE EVENT TRIGGER disk_full_ddl ON ddl_command_start WHEN TAG IN ('CREATE TABLE') "
                "EXECUTE FUNCTION disk_full_ddl()"
            )
        )
    caplog.set_level(logging.WARNING, logger="hotpath.series")
    try:
        with pytest.raises(DBAPIError):
            await server.maintain_series(backend.runtime)
        async with engine.connect() as conn:
            left = await existing(conn, "measurement_points")
        assert old_name not in left, "the expired partition was kept because creating partitions failed"
        assert ahead_name not in left
        assert any(
            "creating partitions ahead failed (DiskFull, SQLSTATE 53100: could not create file" in r.getMessage()
            for r in caplog.records
        )
    finally:
        async with engine.begin() as conn:
            await conn.execute(text("DROP EVENT TRIGGER disk_full_ddl"))
            await conn.execute(text("DROP FUNCTION disk_full_ddl()"))
        await server.maintain_series(backend.runtime)  # the database accepts writes again
    async with engine.connect() as conn:
        assert ahead_name in await existing(conn, "measurement_points")


@pytest.mark.parametrize("loop", ["rollup", "retention"])
async def test_the_upkeep_loops_log_a_refused_write_and_run_again(backend, caplog, monkeypatch, loop):
    """Each loop's pass meets a full disk once (a statement raising SQLSTATE 53100 in the real database),
    logs it with the reason, and runs its next pass."""
    engine = backend.runtime.engine
    passes: list[str] = []

    async def refused_once(*args, **kwargs):
        if not passes:
            passes.append("refused")
            async with engine.begin() as conn:
                await conn.execute(text(f"DO $$ BEGIN {FULL}; END $$"))
        passes.append("ran")
        return (0, 0) if loop == "rollup" else 0

    if loop == "rollup":
        monkeypatch.setattr(samples, "roll_up", refused_once)
    else:
        monkeypatch.setattr(server, "maintain_series", refused_once)
    fields = {"rollup_interval_s": 0.01, "retention_interval_s": 0.01, "rollup_lag_s": 10.0}
    settings = backend.runtime.settings.model_copy(update=fields)
    runtime = SimpleNamespace(settings=settings, engine=engine, sessionmaker=backend.runtime.sessionmaker)
    caplog.set_level(logging.WARNING, logger="hotpath")
    task = asyncio.create_task(server.rollup_loop(runtime) if loop == "rollup" else server.retention_loop(runtime))
    try:

        async def ran_again():
            return passes.count("ran") >= 1

        await wait_until(ran_again)
    finally:
        task.cancel()
    logged = [r.getMessage() for r in caplog.records if f"{loop} pass failed" in r.getMessage()]
    assert logged and "DiskFull, SQLSTATE 53100: could not create file: No space left on device" in logged[0], logged
