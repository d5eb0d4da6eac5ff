# SPDX-License-Identifier: Apache-2.0
"""Measurements: kperfmon's metrics on code resources of a host's targets, started and stopped from
the console, their rows (how each metric is served), and their values over a time range — the live
table (sums per resource over the range, and the newest interval) and the charts (per resource, per
round bucket). Starting and stopping are commands (app.domain.commands); the values are series
(app.storage.samples). A request names resources by catalog identity (digest, function index, block or
instruction offset), never by module name.
"""

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response

from app.api.deps import CurrentUser, RuntimeDep, SessionDep, read_across_nodes, require_role
from app.api.ranges import BAD_RANGE, FromQuery, ToQuery, WindowQuery, range_spec
from app.api.responses import NOT_FOUND, FastJSON, Responses
from app.api.routes.hosts import ExistingHost
from app.api.routes.targets import ACCEPTED, CONFLICT, command_response
from app.api.schemas import (
    CommandPublic,
    MeasurementCfg,
    MeasurementCreate,
    MeasurementDetail,
    MeasurementPublic,
    MeasurementSeries,
    MeasurementValues,
    Message,
)
from app.domain import commands
from app.protocol import measured_edges
from app.storage import measurements, samples, targets
from app.storage.models import User

router = APIRouter(prefix="/hosts/{host_id}/measurements", tags=["measurements"])
OperatorUser = Annotated[User, Depends(require_role("operator"))]
MeasurementId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z_-]+$")]
TOO_MANY: Responses = {413: {"model": Message, "description": "More resources than one measurement may name"}}


async def existing_measurement(host_id: ExistingHost, measurement_id: MeasurementId, session: SessionDep) -> str:
    if await measurements.get(session, host_id, measurement_id) is None:
        raise HTTPException(404, "Measurement not found")
    return measurement_id


ExistingMeasurement = Annotated[str, Depends(existing_measurement)]


@router.post("", response_model=CommandPublic, responses={**NOT_FOUND, **CONFLICT, **ACCEPTED, **TOO_MANY})
async def start_measurement(
    host_id: ExistingHost, body: MeasurementCreate, session: SessionDep, runtime: RuntimeDep, user: OperatorUser
) -> Response:
    """Start measuring resources of a target; answers with the start command (its result names the
    measurement's rows). The measurement's id is `params.measurement_id`."""
    limit = runtime.settings.max_measurement_resources
    if len(body.resources) > limit:
        raise HTTPException(413, f"{len(body.resources)} resources in one request; at most {limit}")
    state = await targets.target_exists(session, host_id, body.target)
    if state is None:
        raise HTTPException(404, "Target not found")
    if state != "attached":
        raise HTTPException(409, f"The target has ended ({state})")
    mid = str(body.measurement_id or uuid.uuid4())
    request = body.request(mid).model_dump()
    try:
        row, created = await runtime.commands.create(
            session, host_id, "start_measurement", request, user.username, body.command_id
        )
    except commands.CommandError as exc:
        raise HTTPException(exc.status, exc.detail) from None
    if created:
        if await measurements.exists(session, mid):
            raise HTTPException(409, "A measurement with this id exists")
        await measurements.create(
            session, mid, host_id, request, body.interval_ms or 0, user.username, uuid.UUID(row["id"])
        )
    await session.commit()
    return command_response(row, created)


@router.get("", response_model=list[MeasurementPublic], responses=NOT_FOUND)
async def list_measurements(
    host_id: ExistingHost, session: SessionDep, _: CurrentUser, limit: int = Query(50, ge=1, le=1000)
) -> FastJSON:
    """The host's measurements, newest first."""
    return FastJSON(await measurements.list_measurements(session, host_id, limit))


@router.get("/{measurement_id}", response_model=MeasurementDetail, responses=NOT_FOUND)
async def get_measurement(
    host_id: ExistingHost, measurement_id: ExistingMeasurement, session: SessionDep, _: CurrentUser
) -> FastJSON:
    """One measurement with its rows and how each metric of each row is served (or why not)."""
    return FastJSON(await measurements.get(session, host_id, measurement_id))


@router.post("/{measurement_id}/stop", response_model=CommandPublic, responses={**NOT_FOUND, **CONFLICT, **ACCEPTED})
async def stop_measurement(
    host_id: ExistingHost,
    measurement_id: ExistingMeasurement,
    session: SessionDep,
    runtime: RuntimeDep,
    user: OperatorUser,
    command_id: uuid.UUID | None = Query(None),
) -> Response:
    """Stop a measurement; its data stays."""
    m = await measurements.get(session, host_id, measurement_id)
    assert m is not None
    if m["state"] in measurements.ENDED:
        raise HTTPException(409, f"The measurement has ended ({m['state']})")
    try:
        row, created = await runtime.commands.create(
            session, host_id, "stop_measurement", {"measurement_id": measurement_id}, user.username, command_id
        )
    except commands.CommandError as exc:
        raise HTTPException(exc.status, exc.detail) from None
    await session.commit()
    return command_response(row, created)


@router.get(
    "/{measurement_id}/values",
    response_model=MeasurementValues,
    responses={**NOT_FOUND, **BAD_RANGE},
    dependencies=[Depends(read_across_nodes)],  # read only: from the host's database node
)
async def measurement_values(
    host_id: ExistingHost,
    measurement_id: ExistingMeasurement,
    session: SessionDep,
    runtime: RuntimeDep,
    _: CurrentUser,
    window_s: int | None = WindowQuery,
    from_: datetime | None = FromQuery,
    to: datetime | None = ToQuery,
) -> FastJSON:
    """Per resource, its values summed over the range (window_s: the last N seconds of the
    measurement's own intervals), the range's measured seconds, and the newest interval's values."""
    spec = range_spec(runtime, window_s, from_, to)
    r = await samples.measurement_range(session, measurement_id, spec)
    if r is None:
        r = samples.empty_range(spec)
    return FastJSON(await samples.measurement_values(session, measurement_id, r))


@router.get(
    "/{measurement_id}/series",
    response_model=MeasurementSeries,
    responses={**NOT_FOUND, **BAD_RANGE},
    dependencies=[Depends(read_across_nodes)],  # read only: from the host's database node
)
async def measurement_series(
    host_id: ExistingHost,
    measurement_id: ExistingMeasurement,
    session: SessionDep,
    runtime: RuntimeDep,
    _: CurrentUser,
    resources: str = Query(
        min_length=1, max_length=2000, pattern=r"^\d+(,\d+)*$", description="Row indexes, comma-separated (at most 64)"
    ),
    points: int = Query(300, ge=10, le=2000),
    window_s: int | None = WindowQuery,
    from_: datetime | None = FromQuery,
    to: datetime | None = ToQuery,
) -> FastJSON:
    """Per resource, its values summed per round bucket of the range, with each bucket's measured
    seconds (rates, concurrency and per-call values are sums over seconds or counts)."""
    wanted = sorted({int(x) for x in resources.split(",")})
    if len(wanted) > 64 or max(wanted) > 2**31 - 1:
        raise HTTPException(400, "At most 64 rows, each below 2^31")
    spec = range_spec(runtime, window_s, from_, to)
    r = await samples.measurement_range(session, measurement_id, spec) or samples.empty_range(spec)
    return FastJSON(await samples.measurement_series(session, measurement_id, r, wanted, points))


@router.get(
    "/{measurement_id}/cfg",
    response_model=MeasurementCfg,
    responses={**NOT_FOUND, **BAD_RANGE},
    dependencies=[Depends(read_across_nodes)],  # read only: from the host's database node
)
async def measurement_cfg(
    host_id: ExistingHost,
    measurement_id: ExistingMeasurement,
    session: SessionDep,
    runtime: RuntimeDep,
    _: CurrentUser,
    function_row: int = Query(ge=0, le=2**31 - 1, description="The function's row"),
    window_s: int | None = WindowQuery,
    from_: datetime | None = FromQuery,
    to: datetime | None = ToQuery,
) -> FastJSON:
    """A function measured with its blocks: each block's count summed over the range (null where there
    is no data) and the edge counts the agent derived from them (exact-derived, estimated, or sampled
    estimates), for the CFG overlay."""
    m = await measurements.get(session, host_id, measurement_id)
    assert m is not None
    fn = next((r for r in m["resources"] if r["index"] == function_row and r["kind"] == "function"), None)
    if fn is None:
        raise HTTPException(404, "No such function row in the measurement")
    spec = range_spec(runtime, window_s, from_, to)
    r = await samples.measurement_range(session, measurement_id, spec) or samples.empty_range(spec)
    if spec.window_s is not None:  # a window reaches back to the measurement's first interval at most
        first = await measurements.first_interval(session, measurement_id, r.start)
        if first is not None and r.start < first < r.end:
            r = samples.TimeRange(first, r.end)
    values = await samples.measurement_values(session, measurement_id, r)
    sums = {v["resource"]: v["values"]["count"] for v in values["resources"]}
    code = await measurements.function_blocks(session, fn["digest"], fn["function_index"])
    rows = {
        res["block_offset"]: res
        for res in m["resources"]
        if res["kind"] == "block" and res["function_row"] == function_row
    }
    labels = {
        res["block_offset"]: next((p["label"] for p in res["metrics"] if p["metric"] == "count"), None)
        for res in rows.values()
    }
    blocks = []
    for off in code:
        res = rows.get(off)
        count = None
        if res is not None and values["intervals"] > 0:
            count = sums.get(res["index"]) or 0.0  # rows without values in an interval counted nothing
        blocks.append({"offset": off, "row": res["index"] if res else None, "count": count, "label": labels.get(off)})
    known = {lbl for lbl in labels.values() if lbl in ("exact", "sampled")}
    basis = "sampled" if "sampled" in known else "exact" if known else "none"
    edges = await measured_edges.edge_counts(session, measurement_id, function_row, r.start, r.end)
    return FastJSON(
        {
            **r.public(),
            "function_row": function_row,
            "function_id": fn["function_id"],
            "function": fn["function"],
            "basis": basis,
            "intervals": values["intervals"],
            "blocks": blocks,
            **edges,
        }
    )
