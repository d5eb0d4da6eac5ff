# SPDX-License-Identifier: Apache-2.0
"""The block-sample time series: writing metric batches (with their delivery marks and the gaps they
record) and deleting samples, gaps and audit records past retention.

Samples for a module whose catalog piece is not yet stored cannot be mapped to a function id; they are
dropped and counted (interval_totals.dropped_samples, and the agent session's counter), because an
interval's hotness is only useful while it is recent and the catalog arrives within seconds.
"""
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine


def interval_start(unix_ns: int) -> datetime:
    return datetime.fromtimestamp(unix_ns / 1e9, tz=UTC)


async def store_batch(engine: AsyncEngine, host_id: str, ts: datetime | None, interval_ms: int,
                      rows: list[tuple[int, int, int]], totals: tuple[int, int, int, int, int] | None, *,
                      mark: tuple[str, int] | None = None, gaps: list[dict] | None = None, refused: bool = False,
                      clock_offset_ms: int | None = None) -> None:
    """Store one data message in one transaction: its sample rows (function_id, block_offset, count) and
    totals (total, user, unmapped, lost, dropped) when ts is given, the gaps it records, and the delivery
    mark (instance id, seq) that makes a resend of it a no-op. A refused batch stores only its gap, the
    mark and, when known, the host's clock offset."""
    async with engine.begin() as conn:
        if ts is not None and totals is not None:
            if rows:
                raw = await conn.get_raw_connection()
                assert raw.driver_connection is not None
                copy_sql = "COPY block_samples (host_id, ts, function_id, block_offset, count) FROM STDIN"
                async with raw.driver_connection.cursor() as cur, cur.copy(copy_sql) as copy:
                    for fid, off, count in rows:
                        await copy.write_row((host_id, ts, fid, off, count))
            await conn.execute(text("""
                INSERT INTO interval_totals (host_id, ts, interval_ms, total_samples, user_samples,
                                             unmapped_samples, lost_samples, dropped_samples)
                VALUES (:h, :ts, :ms, :t, :u, :un, :l, :d)
                ON CONFLICT (host_id, ts) DO UPDATE SET
                  total_samples = interval_totals.total_samples + excluded.total_samples,
                  user_samples = interval_totals.user_samples + excluded.user_samples,
                  unmapped_samples = interval_totals.unmapped_samples + excluded.unmapped_samples,
                  lost_samples = interval_totals.lost_samples + excluded.lost_samples,
                  dropped_samples = interval_totals.dropped_samples + excluded.dropped_samples"""),
                {"h": host_id, "ts": ts, "ms": interval_ms or 1000, "t": totals[0], "u": totals[1],
                 "un": totals[2], "l": totals[3], "d": totals[4]})
        for g in gaps or ():
            await conn.execute(text("""
                INSERT INTO data_gaps (host_id, start_ts, end_ts, instance_id, first_seq, messages, reason, source)
                VALUES (:h, :s, :e, :i, :f, :m, :r, :src)"""),
                {"h": host_id, "s": g["start"], "e": g["end"], "i": g["instance"], "f": g["first_seq"],
                 "m": g["messages"], "r": g["reason"][:1024], "src": g["source"]})
        if mark is not None:
            await conn.execute(text("""
                INSERT INTO delivery_marks (host_id, instance_id, seq, updated_at) VALUES (:h, :i, :s, now())
                ON CONFLICT (host_id, instance_id) DO UPDATE SET seq = greatest(delivery_marks.seq, excluded.seq),
                  updated_at = now()"""), {"h": host_id, "i": mark[0], "s": mark[1]})
        if refused:
            await conn.execute(text("""
                UPDATE hosts SET refused_batches = refused_batches + 1, last_seen = now(),
                  clock_offset_ms = coalesce(:o, clock_offset_ms),
                  clock_checked_at = CASE WHEN :o IS NULL THEN clock_checked_at ELSE now() END
                WHERE id = :h"""), {"h": host_id, "o": clock_offset_ms})
        else:
            await conn.execute(text("UPDATE hosts SET last_seen = now() WHERE id = :h"), {"h": host_id})


async def prune_samples(engine: AsyncEngine, retention_hours: float, now: datetime | None = None,
                        audit_retention_days: float | None = None) -> int:
    """Delete samples, interval totals and gaps older than the retention, and rows stamped in the
    future beyond it (a clock that jumped before validation existed); audit records older than
    `audit_retention_days` when given. Returns the sample rows deleted."""
    now = now or datetime.now(UTC)
    cutoff = now - timedelta(hours=retention_hours)
    future = now + timedelta(hours=1)
    async with engine.begin() as conn:
        deleted = (await conn.execute(text("DELETE FROM block_samples WHERE ts < :c OR ts > :f"),
                                      {"c": cutoff, "f": future})).rowcount
        await conn.execute(text("DELETE FROM interval_totals WHERE ts < :c OR ts > :f"), {"c": cutoff, "f": future})
        await conn.execute(text("DELETE FROM data_gaps WHERE end_ts < :c"), {"c": cutoff})
        await conn.execute(text("DELETE FROM delivery_marks WHERE updated_at < :c"),
                           {"c": now - timedelta(hours=max(retention_hours, 24) * 2)})
        if audit_retention_days is not None:
            await conn.execute(text("DELETE FROM audit_log WHERE at < :c"),
                               {"c": now - timedelta(days=audit_retention_days)})
    return deleted


async def function_names(engine: AsyncEngine, ids: list[int]) -> dict[int, str]:
    if not ids:
        return {}
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT id, name FROM functions WHERE id = ANY(:ids)"), {"ids": ids})
        return {r[0]: r[1] for r in rows}
