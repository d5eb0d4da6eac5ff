# SPDX-License-Identifier: Apache-2.0
"""Plans as the console reads them: lists, one plan with its comparison of the windows before and after
its install and its latest interleaved comparison (app.domain.plan_compare), its audit trail.
"""

import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession

from app.domain import plan_compare
from app.domain.plan_records import RECORD, find, public, refresh_stale
from app.storage import measurements, nodes, samples

log = logging.getLogger("hotpath.plans")


# Per-call figures of a window: (figure, series slot, metric).
PER_CALL = (
    ("wall_ns_per_call", "wall_ns", "wall"),
    ("vtime_ns_per_call", "vtime_ns", "vtime"),
    ("cycles_per_call", "cycles", "cycles"),
    ("instructions_per_call", "instructions", "instructions"),
    ("icache_stall_per_call", "icache_stall", "icache_stall"),
    ("branch_mispredict_per_call", "branch_mispredict", "branch_mispredict"),
)


FIGURES = ("calls_per_s", *(f for f, _, _ in PER_CALL))


async def list_plans(
    db: AsyncSession,
    host_id: str,
    limit: int,
    target: str | None,
    digest: str | None,
    function_index: int | None,
    states: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    await refresh_stale(db, host_id)
    await db.commit()
    where, params = ["host_id = :h"], {"h": host_id, "l": limit}
    if states:
        where.append("state = ANY(:s)")
        params["s"] = list(states)
    if target:
        where.append("target_id = :t")
        params["t"] = target
    if digest:
        where.append("root_digest = :d")
        params["d"] = digest
    if function_index is not None:
        where.append("root_function_index = :i")
        params["i"] = function_index
    rows = await db.execute(
        text(f"SELECT {RECORD} FROM plans WHERE {' AND '.join(where)} ORDER BY created_at DESC LIMIT :l"), params
    )
    return [public(r) for r in rows]


async def get_plan(db: AsyncSession, host_id: str, plan_id: uuid.UUID) -> dict[str, Any] | None:
    await refresh_stale(db, host_id, plan_id)
    await db.commit()
    await nodes.read_across(db, [host_id])  # the commit ended the caller's setting: the windows from the host's node
    row = await find(db, host_id, plan_id)
    if row is None:
        return None
    return await detail(db, host_id, row)


async def body_text(db: AsyncSession, plan_id: uuid.UUID) -> str | None:
    """The plan's body as stored, in JSON text (Postgres renders it: it is not parsed here)."""
    return (await db.execute(text("SELECT plan_json::text FROM plans WHERE id = :id"), {"id": plan_id})).scalar()


async def detail(db: AsyncSession, host_id: str, row: Row[Any]) -> dict[str, Any]:
    """A plan as PlanDetail gives it (GET's answer and every step's): its record, the uprobe-timed windows'
    comparison and the latest interleaved one."""
    out = public(row, detail=True)
    out["comparison"] = await comparison(db, host_id, row)
    out["interleaved"] = await plan_compare.latest(db, row.id)
    return out


async def audit_trail(db: AsyncSession, plan_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = await db.execute(
        text("""
        SELECT id, at, actor, action, target, detail FROM audit_log WHERE target = :t ORDER BY id"""),
        {"t": str(plan_id)},
    )
    return [
        {"id": r.id, "at": r.at, "actor": r.actor, "action": r.action, "target": r.target, "detail": r.detail}
        for r in rows
    ]


async def _window_figures(db: AsyncSession, host_id: str, mid: str | None) -> dict[str, Any] | None:
    """One window's figures for the root (resource 0) over the whole window, and their spread: the
    lowest and highest value of each figure over the window's one-second intervals."""
    if not mid:
        return None
    m = await measurements.get(db, host_id, mid)
    if m is None:
        return None
    out: dict[str, Any] = {
        "measurement_id": mid,
        "state": m["state"],
        "detail": m["detail"],
        "seconds": 0.0,
        "calls": None,
        "unavailable": {},
        "spread": {},
        **{f: None for f in FIGURES},
    }
    if m["resources"]:
        for metric in m["resources"][0]["metrics"]:
            if not metric.get("available"):
                out["unavailable"][metric["metric"]] = metric.get("reason") or "not served on this host"
    start = m["started_at"] or m["created_at"]
    end = m["ended_at"] or m["last_ts"] or datetime.now(UTC)
    r = samples.TimeRange(start - timedelta(seconds=2), end + timedelta(seconds=2))
    vals = await samples.measurement_values(db, mid, r)
    out["seconds"] = vals["measured_seconds"]
    row0 = next((x for x in vals["resources"] if x["resource"] == 0), None)
    if row0 is None or not vals["measured_seconds"]:
        return out
    out.update(_figures(row0["values"], vals["measured_seconds"], out["unavailable"]))
    out["calls"] = row0["values"].get("count")
    series = await samples.measurement_series(db, mid, r, [0], points=3600)
    seconds = {b["t"]: b["seconds"] for b in series["buckets"]}
    per: dict[str, list[float]] = {}
    for point in series["series"][0]["points"]:
        for key, v in _figures(point["values"], seconds.get(point["t"], 0.0), out["unavailable"]).items():
            if v is not None:
                per.setdefault(key, []).append(v)
    out["spread"] = {k: {"min": min(v), "max": max(v), "intervals": len(v)} for k, v in per.items()}
    return out


async def window_summaries(
    db: AsyncSession, windows: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], dict[str, Any]]:
    """The figures of many windows ((host id, measurement id) pairs) for the root over each whole window,
    as `_window_figures` gives them without their spread (the fleet's list of installed plans), in three
    statements whatever their number: the measurements, their first resource's metrics, the sums. A window
    whose measurement is not stored (for that host) is left out."""
    ids = sorted({mid for _h, mid in windows})
    if not ids:
        return {}
    rows = {
        (r.host_id, r.id): r
        for r in await db.execute(
            text("""
        SELECT id, host_id, state, detail, created_at, started_at, ended_at, last_ts FROM measurements
        WHERE id = ANY(:ids)"""),
            {"ids": ids},
        )
    }
    first_metrics = {
        r.measurement_id: r.metrics
        for r in await db.execute(
            text("""
        SELECT DISTINCT ON (measurement_id) measurement_id, metrics FROM measurement_resources
        WHERE measurement_id = ANY(:ids) ORDER BY measurement_id, idx"""),
            {"ids": ids},
        )
    }
    found = [rows[w] for w in dict.fromkeys(windows) if w in rows]
    now = datetime.now(UTC)
    ranges = []
    for m in found:
        start = m.started_at or m.created_at
        end = m.ended_at or m.last_ts or now
        ranges.append((m.id, samples.TimeRange(start - timedelta(seconds=2), end + timedelta(seconds=2))))
    sums = await samples.measurement_sums(db, ranges, 0)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for m, s in zip(found, sums, strict=True):
        unavailable = {
            name: v.get("reason") or "not served on this host"
            for name, v in (first_metrics.get(m.id) or {}).items()
            if not v.get("available")
        }
        w: dict[str, Any] = {
            "measurement_id": m.id,
            "state": m.state,
            "detail": m.detail,
            "seconds": s["measured_seconds"],
            "calls": None,
            "unavailable": unavailable,
            "spread": {},
            **{f: None for f in FIGURES},
        }
        if s["values"] is not None and s["measured_seconds"]:
            w.update(_figures(s["values"], s["measured_seconds"], unavailable))
            w["calls"] = s["values"].get("count")
        out[(m.host_id, m.id)] = w
    return out


def _figures(v: dict[str, float | None], seconds: float, unavailable: dict[str, str]) -> dict[str, float | None]:
    """Calls per second and the per-call figures of summed values over `seconds` measured seconds."""
    calls = v.get("count")
    out: dict[str, float | None] = {f: None for f in FIGURES}
    if calls is not None and seconds:
        out["calls_per_s"] = calls / seconds
    if calls:
        for key, slot, metric in PER_CALL:
            value = v.get(slot)
            if value is not None and metric not in unavailable:
                out[key] = value / calls
    return out


async def comparison(db: AsyncSession, host_id: str, row: Row[Any]) -> dict[str, Any] | None:
    """The root before and after the install (KernInst Figure 4): calls per second, wall and vtime per
    call and the hardware counters per call in each window, each with its spread, and each figure's
    change."""
    before = await _window_figures(db, host_id, row.before_measurement)
    after = await _window_figures(db, host_id, row.after_measurement)
    if before is None and after is None:
        return None
    change = {}
    for key in FIGURES:
        b, a = (before or {}).get(key), (after or {}).get(key)
        change[key] = (a - b) / b if a is not None and b else None
    cpu = (await db.execute(text("SELECT cpu_model FROM hosts WHERE id = :h"), {"h": host_id})).scalar() or ""
    return {"before": before, "after": after, "change": change, "emulated": emulated(cpu)}


# QEMU names the CPU it emulates in software (TCG, no hardware virtualization) "QEMU TCG CPU version ...".
def emulated(cpu_model: str) -> str | None:
    """The label of every time measured on a host whose CPU is emulated in software, else None."""
    if "QEMU" in cpu_model and "TCG" in cpu_model:
        return f"under emulation, not a performance figure (the host's CPU is {cpu_model.strip()})"
    return None
