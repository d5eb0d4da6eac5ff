# SPDX-License-Identifier: Apache-2.0
"""The fleet: hosts grouped by kernel build (narrowed by label), a group's hot code across its hosts (with its
outlier hosts), its flame graph (its hosts' stacks merged into one tree) and two sides of it compared (hosts
by label, ranges) as a differential flame graph, and the plans installed across the fleet. Reads go through
app.storage.fleet and app.storage.stacks (rollups only, never raw rows); the installed plans through
app.domain.fleet_plans."""

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, HTTPException, Path, Query
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.deps import CurrentUser, RuntimeDep, SessionDep
from app.api.ranges import BAD_RANGE, FromQuery, ToQuery, range_spec
from app.api.responses import NOT_FOUND, FastJSON, Responses
from app.api.schemas import FleetFlameDiff, FleetFlameGraph, FleetGroups, FleetHotCode, FleetPlans, Message
from app.domain import fleet_plans
from app.protocol.labels import MAX_LABELS, InvalidLabels, parse_selector
from app.runtime import Runtime
from app.storage import fleet, nodes, stacks
from app.storage.samples import TimeRange

T = TypeVar("T")
U = TypeVar("U")
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
    r = _time_range(runtime, window_s, from_, to)
    group = await _group(session, group_id)
    try:
        found = await fleet.hot_code(
            session, group, _selectors(label), r, min_share, limit, offset, sort, order == "desc"
        )
    except nodes.NodeUnavailable as exc:
        raise HTTPException(503, str(exc)) from None
    return FastJSON(found)


def _time_range(runtime: Runtime, window_s: int | None, start: datetime | None, end: datetime | None) -> TimeRange:
    """A fleet view's range: from and to, or the last window_s seconds ending now (3600 when neither is given)."""
    spec = range_spec(runtime, window_s if start or end else window_s or 3600, start, end)
    if spec.start is not None and spec.end is not None:
        return TimeRange(spec.start, spec.end)
    now = datetime.now(tz=UTC)
    return TimeRange(now - timedelta(seconds=spec.window_s or 3600), now)


async def _group(session: AsyncSession, group_id: str) -> dict[str, Any]:
    group = await fleet.group_summary(session, group_id)
    if group is None:
        raise HTTPException(404, "Group not found")
    return group


WindowQuery = Query(
    None, ge=60, le=86400, description="The last N seconds, ending now (default 3600 when no from/to is given)"
)
IdleQuery = Query("exclude", description="The idle task's samples (pid 0): left out, included, or alone")
CommQuery = Query(None, min_length=1, max_length=64, description="Only threads with this command name")


def _flame_host(h: Any, samples: dict[str, int]) -> dict[str, Any]:
    return {"id": h.id, "hostname": h.hostname, "online": h.online, "labels": h.labels, "samples": samples.get(h.id, 0)}


async def _scope(session: AsyncSession, group_id: str, hosts: list[Any], narrowed: bool) -> stacks.GroupScope:
    """The group asked about, with every host of it (the label filter's hosts when nothing narrows it)."""
    every = await fleet.group_hosts(session, group_id, {}) if narrowed else hosts
    return stacks.GroupScope(group_id, [h.id for h in every])


def _covered(g: stacks.GroupStacks) -> dict[str, Any]:
    return {
        "covered_from": g.covered[0] if g.covered else None,
        "covered_to": g.covered[1] if g.covered else None,
        "rollup": g.rollup,
    }


async def _both(a: Coroutine[Any, Any, T], b: Coroutine[Any, Any, U]) -> tuple[T, U]:
    """Two reads at once; the first to fail cancels the other and is raised as it is (a 503 stays a 503)."""
    try:
        async with asyncio.TaskGroup() as tasks:
            ta, tb = tasks.create_task(a), tasks.create_task(b)
    except* Exception as group:  # noqa: BLE001 - re-raised as it is, unwrapped from the task group
        raise group.exceptions[0] from None
    return ta.result(), tb.result()


async def _read(session: AsyncSession, read: Any) -> Any:
    """Run a read across the database nodes; a node that does not answer is a 503 naming it."""
    try:
        await nodes.read_across(session)
        # Bounded with nodes: a node that hangs on its connection would hold the request (and the
        # coordinator's connection to it) for as long as the kernel keeps the connection.
        async with asyncio.timeout(nodes.READ_TIMEOUT_S if nodes.active() is not None else None):
            return await read()
    except nodes.NodeUnavailable as down:
        raise HTTPException(503, str(down)) from None
    except (DBAPIError, TimeoutError) as exc:
        try:
            await nodes.name_unreachable(exc)
        except nodes.NodeUnavailable as down:
            raise HTTPException(503, str(down)) from None
        if isinstance(exc, TimeoutError):
            raise HTTPException(503, f"the database nodes did not answer within {nodes.READ_TIMEOUT_S:g} s") from None
        raise


@router.get(
    "/groups/{group_id}/flamegraph",
    response_model=FleetFlameGraph,
    responses={**NOT_FOUND, **BAD_RANGE, **BAD_LABEL},
)
async def flame_graph(
    group_id: GroupId,
    session: SessionDep,
    runtime: RuntimeDep,
    _: CurrentUser,
    label: list[str] = LabelQuery,
    window_s: int | None = WindowQuery,
    from_: datetime | None = FromQuery,
    to: datetime | None = ToQuery,
    idle: Literal["exclude", "include", "only"] = IdleQuery,
    comm: str | None = CommQuery,
) -> FastJSON:
    """The call stacks of the group's hosts (those carrying every label of the filter) in the range as one
    tree, frames merged by function across the hosts, as a host's flame graph merges them. Read from the
    per-host minute and ten-minute stack rollups only (the whole minutes of the range below the rollup
    watermark; the answer says which part of the range that is)."""
    r = _time_range(runtime, window_s, from_, to)
    labels = _selectors(label)
    group = await _group(session, group_id)
    flt = stacks.StackFilter(comm=comm, idle=idle)

    async def read() -> dict[str, Any]:
        hosts = await fleet.group_hosts(session, group_id, labels)
        scope = await _scope(session, group_id, hosts, bool(labels))
        g = await stacks.group_stacks(session, [h.id for h in hosts], r.start, r.end, flt, scope)
        return {
            **r.public(),
            **_covered(g),
            "group": group,
            "labels": labels,
            "filter": flt.public(),
            "hosts": [_flame_host(h, g.per_host) for h in hosts],
            **stacks.group_flame(g),
        }

    return FastJSON(await _read(session, read))


def _side_range(
    runtime: Runtime, common: TimeRange, start: datetime | None, end: datetime | None, side: str
) -> TimeRange:
    if start is None and end is None:
        return common
    spec = range_spec(runtime, None, start, end, f"range {side}")
    assert spec.start is not None and spec.end is not None
    return TimeRange(spec.start, spec.end)


def _side_query(side: str, what: str) -> Any:
    return Query(
        [],
        max_length=MAX_LABELS,
        description=f"Side {side}: only hosts {what} this label, as key=value; repeat for several",
    )


@router.get(
    "/groups/{group_id}/flamegraph/diff",
    response_model=FleetFlameDiff,
    responses={**NOT_FOUND, **BAD_RANGE, **BAD_LABEL},
)
async def flame_diff(
    group_id: GroupId,
    session: SessionDep,
    runtime: RuntimeDep,
    _: CurrentUser,
    label: list[str] = LabelQuery,
    a_label: list[str] = _side_query("A", "with"),
    b_label: list[str] = _side_query("B", "with"),
    a_without: list[str] = _side_query("A", "without"),
    b_without: list[str] = _side_query("B", "without"),
    window_s: int | None = WindowQuery,
    from_: datetime | None = FromQuery,
    to: datetime | None = ToQuery,
    a_from: datetime | None = Query(None, description="Start of side A's range (default: the range of from/to)"),
    a_to: datetime | None = Query(None, description="End of side A's range, exclusive"),
    b_from: datetime | None = Query(None, description="Start of side B's range (default: the range of from/to)"),
    b_to: datetime | None = Query(None, description="End of side B's range, exclusive"),
    idle: Literal["exclude", "include", "only"] = IdleQuery,
    comm: str | None = CommQuery,
) -> FastJSON:
    """Two sides of the group as a differential flame graph: each side its hosts (the group's hosts with
    every label of `label` and of its own labels, and none of its `without` labels: e.g. a_label=rack=r1
    against b_without=rack=r1, one rack against the others) over its range (its own from/to, or the common
    window_s or from/to: e.g. before and after a roll-out), merged into one tree by function with both
    sides' samples, in the shape of a host's differential flame graph. Read as the group's flame graph is."""
    common = _time_range(runtime, window_s, from_, to)
    ra = _side_range(runtime, common, a_from, a_to, "A")
    rb = _side_range(runtime, common, b_from, b_to, "B")
    base = _selectors(label)
    sides = []
    for labels, without in ((a_label, a_without), (b_label, b_without)):
        own = _selectors(labels)
        for key, value in own.items():
            if base.get(key, value) != value:
                raise HTTPException(400, f"The label filter asks for two values of {key}")
        sides.append(({**base, **own}, _selectors(without)))
    group = await _group(session, group_id)
    flt = stacks.StackFilter(comm=comm, idle=idle)

    async def read_side(r: TimeRange, labels: dict[str, str], without: dict[str, str]) -> tuple[Any, dict[str, Any]]:
        # Each side on a session (a database connection) of its own, both at once: Postgres sums one side's
        # rows while the other's are summed or shaped.
        async with runtime.sessionmaker() as own:

            async def read() -> tuple[Any, dict[str, Any]]:
                hosts = await fleet.group_hosts(own, group_id, labels, without)
                scope = await _scope(own, group_id, hosts, bool(labels or without))
                g = await stacks.group_stacks(own, [h.id for h in hosts], r.start, r.end, flt, scope)
                public = {
                    **r.public(),
                    **_covered(g),
                    "labels": labels,
                    "without": without,
                    "hosts": [_flame_host(h, g.per_host) for h in hosts],
                }
                return g, public

            side: tuple[Any, dict[str, Any]] = await _read(own, read)
            return side

    (ga, pa), (gb, pb) = await _both(read_side(ra, *sides[0]), read_side(rb, *sides[1]))
    return FastJSON({"group": group, "filter": flt.public(), "a": pa, "b": pb, **stacks.group_flame_diff(ga, gb)})


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
