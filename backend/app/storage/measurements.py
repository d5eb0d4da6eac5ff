# SPDX-License-Identifier: Apache-2.0
"""Measurements as the backend records them: the request, the rows the agent armed (each with how its
metrics are served), and the state, from `starting` (the start command is on its way) to `armed`,
`running`, and an end (`target_exited`, `stopped`, `failed`). The values are series (app.storage.samples).

The agent is the authority on what runs: its Hello lists every measurement it runs or ended in its
current run, so after any reconnect the backend updates states and rows from it; a measurement the
backend thinks active that the agent does not list has ended without a final word (failed, with the
reason). A batch's state moves a measurement forward; an end state is final.
"""

import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.protocol.agent_input import LABELS, MEASUREMENT_STATES, METRICS, RESOURCE_KINDS
from app.protocol.measurement_request import MeasurementRequest, ResourceRequest
from app.protocol.proto import pb
from app.storage.models import hex64, i64_to_u64, u64_to_i64

ACTIVE = ("starting", "armed", "running")
ENDED = ("target_exited", "stopped", "failed")


def _dt(ns: int) -> datetime | None:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC) if ns > 0 else None


_KIND_PB = {v: k for k, v in RESOURCE_KINDS.items()}


def request_to_pb(req: MeasurementRequest | dict[str, Any]) -> "pb.StartMeasurement":
    """StartMeasurement of a request (or of its stored JSON): every field by its name, None as zero."""
    d = MeasurementRequest.model_validate(req).model_dump(exclude_none=True)
    d["resources"] = [pb.ResourceRef(**{**r, "kind": _KIND_PB[r["kind"]]}) for r in d["resources"]]
    return pb.StartMeasurement(**d)


def request_from_pb(m: "pb.StartMeasurement") -> MeasurementRequest:
    """The request of a StartMeasurement (an agent's Hello lists it): a zero is None where it may be."""

    def fields(msg: Any, model: type[BaseModel]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, f in model.model_fields.items():
            v = getattr(msg, name)
            out[name] = None if f.default is None and not v else v
        return out

    d = fields(m, MeasurementRequest)
    d["metrics"] = list(m.metrics)
    d["resources"] = [
        {**fields(r, ResourceRequest), "kind": RESOURCE_KINDS.get(r.kind, "function")} for r in m.resources
    ]
    return MeasurementRequest.model_validate(d)


async def exists(session: AsyncSession, measurement_id: str) -> bool:
    return (
        await session.execute(text("SELECT 1 FROM measurements WHERE id = :m"), {"m": measurement_id})
    ).first() is not None


async def create(
    session: AsyncSession,
    measurement_id: str,
    host_id: str,
    request: MeasurementRequest | dict[str, Any],
    interval_ms: int,
    actor: str,
    command_id: uuid.UUID,
) -> None:
    request = MeasurementRequest.model_validate(request).model_dump()
    await session.execute(
        text("""
        INSERT INTO measurements (id, host_id, target_id, state, metrics, request, interval_ms, start_command,
                                  created_by)
        VALUES (:id, :h, :t, 'starting', CAST(:metrics AS jsonb), CAST(:req AS jsonb), :iv, :c, :by)"""),
        {
            "id": measurement_id,
            "h": host_id,
            "t": request["target"],
            "metrics": orjson.dumps(request["metrics"]).decode(),
            "req": orjson.dumps(request).decode(),
            "iv": interval_ms,
            "c": command_id,
            "by": actor,
        },
    )


async def store_info(conn: AsyncConnection, host_id: str, info: "pb.MeasurementInfo") -> None:
    """Record what the agent says about a measurement (its start result, Hello): its rows when they
    are not stored yet, and its state (an end state is final)."""
    state = MEASUREMENT_STATES[info.state]
    ended = state in ENDED
    request = (
        request_from_pb(info.request)
        if info.HasField("request")
        else MeasurementRequest(measurement_id=info.measurement_id, target=info.target, metrics=[], resources=[])
    ).model_dump()
    await conn.execute(
        text("""
        INSERT INTO measurements (id, host_id, target_id, state, detail, metrics, request, interval_ms,
                                  resource_count, created_by, started_at, ended_at)
        VALUES (:id, :h, :t, :state, :detail, CAST(:metrics AS jsonb), CAST(:req AS jsonb), :iv, :n, 'agent',
                :start, :end)
        ON CONFLICT (id) DO UPDATE SET
          state = CASE WHEN measurements.state IN ('target_exited', 'stopped', 'failed') AND NOT :ended
                       THEN measurements.state ELSE excluded.state END,
          detail = CASE WHEN measurements.state IN ('target_exited', 'stopped', 'failed') AND NOT :ended
                        THEN measurements.detail ELSE excluded.detail END,
          interval_ms = excluded.interval_ms, resource_count = excluded.resource_count,
          started_at = coalesce(measurements.started_at, excluded.started_at),
          ended_at = coalesce(measurements.ended_at, excluded.ended_at)
        WHERE measurements.host_id = excluded.host_id"""),
        {
            "id": info.measurement_id,
            "h": host_id,
            "t": info.target,
            "state": state,
            "detail": info.detail,
            "metrics": orjson.dumps(request["metrics"]).decode(),
            "req": orjson.dumps(request).decode(),
            "iv": info.interval_ms,
            "n": len(info.resources),
            "start": _dt(info.started_unix_ns),
            "end": _dt(info.ended_unix_ns) if ended else None,
            "ended": ended,
        },
    )
    have = (
        await conn.execute(
            text("SELECT count(*) FROM measurement_resources WHERE measurement_id = :m"), {"m": info.measurement_id}
        )
    ).scalar_one()
    if have == len(info.resources) or not info.resources:
        return
    await conn.execute(text("DELETE FROM measurement_resources WHERE measurement_id = :m"), {"m": info.measurement_id})
    rows = []
    for i, r in enumerate(info.resources):
        plans = {
            METRICS[p.metric]: {
                "available": p.available,
                "label": LABELS[p.label],
                "mechanism": p.mechanism,
                "reason": p.reason,
                "unit": p.unit,
            }
            for p in r.metrics
        }
        rows.append(
            {
                "m": info.measurement_id,
                "i": i,
                "d": r.digest,
                "fi": r.function_index,
                "k": RESOURCE_KINDS[r.kind],
                "bo": r.block_offset if r.kind == pb.RESOURCE_KIND_BLOCK else None,
                "fn": r.function,
                "a": u64_to_i64(r.address),
                "s": r.size,
                "fr": r.function_row - 1 if r.function_row else None,
                "mt": orjson.dumps(plans).decode(),
            }
        )
    await conn.execute(
        text("""
        INSERT INTO measurement_resources (measurement_id, idx, digest, function_index, kind, block_offset,
                                           function_name, address, size, function_row, metrics)
        VALUES (:m, :i, :d, :fi, :k, :bo, :fn, :a, :s, :fr, CAST(:mt AS jsonb))"""),
        rows,
    )


async def end_unreported(conn: AsyncConnection, host_id: str, reported: list[str]) -> list[str]:
    """Active measurements of the host its agent no longer lists: failed, with the reason."""
    rows = await conn.execute(
        text("""
        UPDATE measurements SET state = 'failed', ended_at = now(),
          detail = 'the agent no longer runs it (its state folder was lost, or it never arrived)'
        WHERE host_id = :h AND state IN ('armed', 'running') AND NOT (id = ANY(:ids)) RETURNING id"""),
        {"h": host_id, "ids": reported},
    )
    return [r[0] for r in rows]


async def fail(conn: AsyncConnection, measurement_id: str, detail: str) -> None:
    await conn.execute(
        text("""
        UPDATE measurements SET state = 'failed', detail = :d, ended_at = now()
        WHERE id = :m AND state NOT IN ('target_exited', 'stopped', 'failed')"""),
        {"m": measurement_id, "d": detail},
    )


async def rows_of(conn: AsyncConnection, host_id: str, measurement_id: str) -> int | None:
    """How many rows a measurement of this host has (None: no such measurement on this host)."""
    row = (
        await conn.execute(
            text("SELECT resource_count FROM measurements WHERE id = :m AND host_id = :h"),
            {"m": measurement_id, "h": host_id},
        )
    ).first()
    return None if row is None else int(row[0])


def _public(r: Row[Any]) -> dict[str, Any]:
    return {
        "id": r.id,
        "host_id": r.host_id,
        "target_id": r.target_id,
        "state": r.state,
        "detail": r.detail,
        "metrics": r.metrics,
        "interval_ms": r.interval_ms,
        "resource_count": r.resource_count,
        "created_by": r.created_by,
        "created_at": r.created_at,
        "started_at": r.started_at,
        "ended_at": r.ended_at,
        "last_ts": r.last_ts,
        "start_command": str(r.start_command) if r.start_command else None,
        "refused_intervals": int(r.refused_intervals),
        "refusal": r.refusal,
    }


async def list_measurements(session: AsyncSession, host_id: str, limit: int) -> list[dict[str, Any]]:
    rows = await session.execute(
        text("""
        SELECT * FROM measurements WHERE host_id = :h ORDER BY created_at DESC LIMIT :l"""),
        {"h": host_id, "l": limit},
    )
    return [_public(r) for r in rows]


async def get(session: AsyncSession, host_id: str, measurement_id: str) -> dict[str, Any] | None:
    row = (
        await session.execute(
            text("SELECT * FROM measurements WHERE id = :m AND host_id = :h"), {"m": measurement_id, "h": host_id}
        )
    ).first()
    if row is None:
        return None
    out = _public(row)
    out["request"] = row.request
    res = await session.execute(
        text("""
        SELECT mr.*, f.id AS function_id FROM measurement_resources mr
        LEFT JOIN functions f ON f.digest = mr.digest AND f.index = mr.function_index
        WHERE mr.measurement_id = :m ORDER BY mr.idx"""),
        {"m": measurement_id},
    )
    out["resources"] = []
    for r in res:
        addr = i64_to_u64(r.address)
        out["resources"].append(
            {
                "index": r.idx,
                "digest": r.digest,
                "function_index": r.function_index,
                "function_id": r.function_id,
                "kind": r.kind,
                "block_offset": r.block_offset,
                "function": r.function_name,
                "address": addr,
                "address_hex": hex64(addr),
                "size": r.size,
                "function_row": r.function_row,
                "metrics": [{"metric": k, **v} for k, v in (r.metrics or {}).items()],
            }
        )
    return out


async def function_blocks(session: AsyncSession, digest: str, index: int) -> list[int]:
    """The block offsets of a catalog function, in order."""
    blocks = (
        await session.execute(
            text("SELECT blocks FROM function_code WHERE digest = :d AND index = :i"), {"d": digest, "i": index}
        )
    ).scalar()
    return [int(b[0]) for b in blocks or []]


async def first_interval(session: AsyncSession, measurement_id: str, since: datetime) -> datetime | None:
    """The start of the measurement's first interval at or after `since`."""
    return (
        await session.execute(
            text("""
        SELECT min(ts) FROM measurement_points WHERE measurement_id = :m AND ts >= :s"""),
            {"m": measurement_id, "s": since},
        )
    ).scalar()
