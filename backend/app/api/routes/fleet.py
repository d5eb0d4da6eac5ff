# SPDX-License-Identifier: Apache-2.0
"""The fleet: hosts grouped by kernel build (narrowed by label), a group's hot code across its hosts (with its
outlier hosts), and the plans installed across the fleet. Hot code reads go through app.storage.fleet
(rollups only, never raw rows); the installed plans through app.domain.fleet_plans."""

from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Path, Query

from app.api.deps import CurrentUser, RuntimeDep, SessionDep
from app.api.ranges import BAD_RANGE, FromQuery, ToQuery, range_spec
from app.api.responses import NOT_FOUND, FastJSON, Responses
from app.api.schemas import FleetGroups, FleetHotCode, FleetPlans, Message
from app.domain import fleet_plans
from app.protocol.labels import MAX_LABELS, InvalidLabels, parse_selector
from app.storage import fleet, nodes
from app.storage.samples import TimeRange

router = APIRouter(prefix="/fleet", tags=["fleet"])
GroupId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="A group's id (FleetGroup.id)")]
LabelQuery = Query(
    [],
    max_length=MAX_LABELS,
    description="Only hosts with this label, as key=value (e.g. role=db); repeat to require several",
)
BAD_LABEL: Responses = {400: {"model": Message, "description": "A label filter is not key=value by the label rules"}}


def _selectors(label: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for sel in label:
        try:
            key, value = parse_selector(sel)
        except InvalidLabels as exc:
            raise HTTPException(400, str(exc)) from None
        if key in out and out[key] != value:
            raise HTTPException(400, f"The label filter asks for two values of {key}")
        out[key] = value
    return out


@router.get("/groups", response_model=FleetGroups, responses=BAD_LABEL)
async def list_groups(
    session: SessionDep,
    _: CurrentUser,
    label: list[str] = LabelQuery,
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0, le=1_000_000),
    sort: Literal["hosts", "release", "online", "offline"] = "hosts",
    order: Literal["desc", "asc"] = "desc",
) -> FastJSON:
    """Active hosts grouped by kernel build (release and build id), with host, online and offline counts
    and each host's labels; only hosts carrying every label of the filter."""
    return FastJSON(await fleet.groups(session, _selectors(label), limit, offset, sort, order == "desc"))


@router.get(
    "/groups/{group_id}/hot-code", response_model=FleetHotCode, responses={**NOT_FOUND, **BAD_RANGE, **BAD_LABEL}
)
async def hot_code(
    group_id: GroupId,
    session: SessionDep,
    runtime: RuntimeDep,
    _: CurrentUser,
    label: list[str] = LabelQuery,
    window_s: int | None = Query(
        None, ge=60, le=86400, description="The last N seconds, ending now (default 3600 when no from/to is given)"
    ),
    from_: datetime | None = FromQuery,
    to: datetime | None = ToQuery,
    min_share: float = Query(
        0.01, gt=0, le=1, description="A function is hot on a host from this share of the host's busy samples"
    ),
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0, le=1_000_000),
    sort: Literal["samples", "hosts", "name"] = "samples",
    order: Literal["desc", "asc"] = "desc",
) -> FastJSON:
    """The group's hottest functions in the range, across its hosts: samples on each host and the share of
    the group's hosts where each is hot, and the outlier hosts (a function far hotter on a few hosts than on
    the group's typical host, by the rule `outlier_rule` states) over every function, not only the page.
    Read from the per-function minute, ten-minute and hour rollups only; the answer says which part of the
    range they cover."""
    spec = range_spec(runtime, window_s if from_ or to else window_s or 3600, from_, to)
    group = await fleet.group_summary(session, group_id)
    if group is None:
        raise HTTPException(404, "Group not found")
    if spec.start is not None and spec.end is not None:
        r = TimeRange(spec.start, spec.end)
    else:
        end = datetime.now(tz=UTC)
        r = TimeRange(end - timedelta(seconds=spec.window_s or 3600), end)
    try:
        found = await fleet.hot_code(
            session, group, _selectors(label), r, min_share, limit, offset, sort, order == "desc"
        )
    except nodes.NodeUnavailable as exc:
        raise HTTPException(503, str(exc)) from None
    return FastJSON(found)


@router.get("/plans", response_model=FleetPlans, responses=BAD_LABEL)
async def installed_plans(
    session: SessionDep,
    _: CurrentUser,
    group_id: str | None = Query(
        None, pattern=r"^[0-9a-f]{32}$", description="Only hosts of this kernel-build group (FleetGroup.id)"
    ),
    kernel_build_id: str | None = Query(
        None, min_length=1, max_length=128, pattern=r"^[0-9a-f]+$", description="Only hosts of this kernel build id"
    ),
    label: list[str] = LabelQuery,
    reverted_within_h: int = Query(
        0, ge=0, le=720, description="Also the plans reverted in the last this many hours (0: installed only)"
    ),
    limit: int = Query(50, ge=1, le=200),
    offset: int = Query(0, ge=0, le=1_000_000),
) -> FastJSON:
    """The plans installed across the fleet, the latest install first: host, root and target, since when,
    installed and approved by whom, the roll-out that installed it, and the root's measured calls per second
    and wall time per call before and after the install (read for this page's plans only)."""
    try:
        found = await fleet_plans.installed(
            session, group_id, kernel_build_id, _selectors(label), reverted_within_h, limit, offset
        )
    except nodes.NodeUnavailable as exc:
        raise HTTPException(503, str(exc)) from None
    return FastJSON(found)
