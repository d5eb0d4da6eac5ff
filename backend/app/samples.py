# SPDX-License-Identifier: Apache-2.0
"""The block-sample time series: writing metric batches and deleting samples past retention.

Samples for a module whose catalog piece is not yet stored cannot be mapped to a function id; they are
dropped and counted (interval_totals.dropped_samples, and the agent session's counter), because an
interval's hotness is only useful while it is recent and the catalog arrives within seconds.
"""
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine


def interval_start(unix_ns: int) -> datetime:
    return datetime.fromtimestamp(unix_ns / 1e9, tz=UTC)


async def store_batch(engine: AsyncEngine, host_id: str, ts: datetime, interval_ms: int,
                      rows: list[tuple[int, int, int]], totals: tuple[int, int, int, int, int]) -> None:
    """rows: (function_id, block_offset, count); totals: (total, user, unmapped, lost, dropped)."""
    async with engine.begin() as conn:
        if rows:
            raw = await conn.get_raw_connection()
            assert raw.driver_connection is not None
            copy_sql = "COPY block_samples (host_id, ts, function_id, block_offset, count) FROM STDIN"
            async with raw.driver_connection.cursor() as cur, cur.copy(copy_sql) as copy:
                for fid, off, count in rows:
                    await copy.write_row((host_id, ts, fid, off, count))
        await conn.execute(text("""
            INSERT INTO interval_totals (host_id, ts, interval_ms, total_samples, user_samples, unmapped_samples,
                                         lost_samples, dropped_samples)
            VALUES (:h, :ts, :ms, :t, :u, :un, :l, :d)
            ON CONFLICT (host_id, ts) DO UPDATE SET
              total_samples = interval_totals.total_samples + excluded.total_samples,
              user_samples = interval_totals.user_samples + excluded.user_samples,
              unmapped_samples = interval_totals.unmapped_samples + excluded.unmapped_samples,
              lost_samples = interval_totals.lost_samples + excluded.lost_samples,
              dropped_samples = interval_totals.dropped_samples + excluded.dropped_samples"""),
            {"h": host_id, "ts": ts, "ms": interval_ms or 1000, "t": totals[0], "u": totals[1], "un": totals[2],
             "l": totals[3], "d": totals[4]})
        await conn.execute(text("UPDATE hosts SET last_seen = now() WHERE id = :h"), {"h": host_id})


async def prune_samples(engine: AsyncEngine, retention_hours: float, now: datetime | None = None) -> int:
    """Delete samples and interval totals older than the retention; returns the sample rows deleted."""
    cutoff = (now or datetime.now(UTC)) - timedelta(hours=retention_hours)
    async with engine.begin() as conn:
        deleted = (await conn.execute(text("DELETE FROM block_samples WHERE ts < :c"), {"c": cutoff})).rowcount
        await conn.execute(text("DELETE FROM interval_totals WHERE ts < :c"), {"c": cutoff})
    return deleted


async def function_names(engine: AsyncEngine, ids: list[int]) -> dict[int, str]:
    if not ids:
        return {}
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT id, name FROM functions WHERE id = ANY(:ids)"), {"ids": ids})
        return {r[0]: r[1] for r in rows}
