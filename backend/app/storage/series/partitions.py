# SPDX-License-Identifier: Apache-2.0
"""Time partitions of the series: created ahead, dropped whole when past the retention.

Raw tables (and the call stacks' minute rollup) have one partition per hour (`<table>_pYYYYMMDDHH`), rollups one per day
(`<table>_pYYYYMMDD`); a partition holds [start, start + step). Partitions are made for the whole window
the backend accepts data for (the retention back, a few hours ahead), so an insert never lacks one.
Replicas may run this at once: an advisory lock serialises them, one table's transaction at a time.
"""

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.storage.series.layout import HOURLY_TABLES, SERIES_TABLES, STACK_TABLES

log = logging.getLogger("hotpath.series")
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
LOCK_KEY = 0x68707061  # "hppa": partition maintenance
_NAME = re.compile(r"_p(\d{8})(\d{2})?$")


def _floor(t: datetime, step: timedelta) -> datetime:
    t = t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return t.replace(hour=0) if step == DAY else t


def partition_name(table: str, start: datetime, step: timedelta) -> str:
    return f"{table}_p{start:%Y%m%d%H}" if step == HOUR else f"{table}_p{start:%Y%m%d}"


def partition_start(name: str) -> datetime | None:
    m = _NAME.search(name)
    if m is None:
        return None
    return datetime.strptime(m.group(1) + (m.group(2) or "00"), "%Y%m%d%H").replace(tzinfo=UTC)


def step_of(table: str) -> timedelta:
    return HOUR if table in HOURLY_TABLES else DAY


async def existing(conn: AsyncConnection, table: str) -> list[str]:
    rows = await conn.execute(
        text("""
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = to_regclass(:t) ORDER BY c.relname"""),
        {"t": table},
    )
    return [r[0] for r in rows]


@asynccontextmanager
async def _maintaining(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One table's maintenance: a transaction of its own, holding the maintenance lock (one maintainer at a
    time, across replicas). A partition's CREATE or DROP locks its parent table exclusively until the
    transaction ends; were every table one transaction, the lock on a raw table would be held while waiting
    for a rollup table that a rollup holds (INSERT INTO rollup SELECT ... FROM raw locks rollup, then raw),
    and the two would deadlock. One table at a time holds one parent's lock and waits for nothing else."""
    async with engine.begin() as conn:
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_KEY})
        yield conn


async def ensure(
    engine: AsyncEngine,
    now: datetime,
    raw_back: timedelta,
    rollup_back: timedelta,
    raw_ahead: timedelta = timedelta(hours=3),
    rollup_ahead: timedelta = timedelta(days=2),
) -> int:
    """Create every missing partition from `back` before now to `ahead` after it; returns how many."""
    created = 0
    for table in SERIES_TABLES:
        async with _maintaining(engine) as conn:
            step = step_of(table)
            back, ahead = (raw_back, raw_ahead) if step == HOUR else (rollup_back, rollup_ahead)
            have = set(await existing(conn, table))
            t, end = _floor(now - back, step), now + ahead
            while t < end:
                name = partition_name(table, t, step)
                if name not in have:
                    await conn.execute(
                        text(
                            f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {table} "
                            f"FOR VALUES FROM ('{t.isoformat()}') TO ('{(t + step).isoformat()}')"
                        )
                    )
                    created += 1
                t += step
    if created:
        log.info("created %d series partition(s)", created)
    return created


async def drop_expired(
    engine: AsyncEngine,
    now: datetime,
    raw_retention: timedelta,
    rollup_retention: timedelta,
    stack_retention: timedelta | None = None,
) -> tuple[int, int]:
    """Drop the partitions that end before the retention (call stacks and their minute rollup:
    `stack_retention`, at most the raw retention); returns (partitions dropped, sample intervals they held)."""
    stacks = min(raw_retention, stack_retention) if stack_retention is not None else raw_retention
    dropped = rows = 0
    for table in SERIES_TABLES:
        async with _maintaining(engine) as conn:
            step = step_of(table)
            cutoff = now - (stacks if table in STACK_TABLES else raw_retention if step == HOUR else rollup_retention)
            for name in await existing(conn, table):
                start = partition_start(name)
                if start is None or start + step > cutoff:
                    continue
                if step == HOUR and table == "sample_intervals":
                    rows += (await conn.execute(text(f"SELECT count(*) FROM {name}"))).scalar_one()
                await conn.execute(text(f"DROP TABLE {name}"))
                dropped += 1
    if dropped:
        log.info("retention: dropped %d series partition(s) (%d sample intervals)", dropped, rows)
    return dropped, rows
