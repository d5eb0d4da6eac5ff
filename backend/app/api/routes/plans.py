# SPDX-License-Identifier: Apache-2.0
"""Code positioning plans of a host, and their approval workflow (app.domain.plans).

Making a plan, requesting its approval, installing and reverting it need the operator role; approving
and rejecting need the approver role and a user other than the one who requested it. Installing is
allowed only for an approved plan that still fits its target; the agent is sent the approved code
hash and refuses anything else. Comparing an installed plan with the original code needs the role
that installs. Reading plans and their audit trail needs a signed-in user.

A plan is served in two parts: its record (GET /plans/{id} and every step's answer: state, members,
workflow, comparisons; small, polled) and its body (GET /plans/{id}/body: the agent's plan, up to
16 MiB, stored once when the agent's answer is checked and never changed), fetched once and cacheable
forever under its entity tag (the record's `body_etag`); If-None-Match with it gets 304.
"""

import uuid
from collections.abc import Awaitable
from typing import Annotated, Any, NoReturn

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.deps import CurrentUser, RuntimeDep, SessionDep, read_across_nodes, require_role
from app.api.responses import NOT_FOUND, FastJSON, Responses, not_modified, quick_gzip_json
from app.api.routes.catalogs import IMMUTABLE
from app.api.routes.hosts import ExistingHost
from app.api.schemas import (
    Message,
    PlanAuditEntry,
    PlanCompare,
    PlanCreate,
    PlanDetail,
    PlanInstall,
    PlanPublic,
    PlanReject,
    PlanState,
)
from app.domain import plan_records, plan_views, plans
from app.gen.plan import Plan as GenPlan
from app.runtime import Runtime
from app.storage import nodes
from app.storage.models import User

router = APIRouter(prefix="/hosts/{host_id}/plans", tags=["plans"])
OperatorUser = Annotated[User, Depends(require_role("operator"))]
ApproverUser = Annotated[User, Depends(require_role("approver"))]
CONFLICT: Responses = {409: {"model": Message, "description": "The plan is not in a state that allows this"}}
FORBIDDEN: Responses = {403: {"model": Message, "description": "The role is missing, or the requester may not decide"}}
ACCEPTED: Responses = {202: {"model": PlanPublic, "description": "The plan, being made by the agent"}}


def _fail(exc: plans.PlanError) -> NoReturn:
    raise HTTPException(exc.status, exc.detail) from None


@router.post("", response_model=PlanPublic, responses={**NOT_FOUND, **CONFLICT, **ACCEPTED})
async def make_plan(
    host_id: ExistingHost, body: PlanCreate, session: SessionDep, runtime: RuntimeDep, user: OperatorUser
) -> FastJSON:
    """Ask the host's agent for a plan of the root function; the plan is `planning` until the agent
    answers and the backend has checked the answer (`ready`, or `failed` with the reason). Follow it
    with GET /plans/{id} or its make command."""
    try:
        row, created = await runtime.plans.create(session, host_id, body, user.username)
    except plans.PlanError as exc:
        _fail(exc)
    await session.commit()
    plan_records.publish_state(runtime.hub, host_id, row["id"], row["state"])
    return FastJSON(row, status_code=202 if created else 200)


@router.get("", response_model=list[PlanPublic], responses=NOT_FOUND)
async def list_plans(
    host_id: ExistingHost,
    session: SessionDep,
    _: CurrentUser,
    target: str | None = Query(None, max_length=64, pattern=r"^(kernel|p[0-9]{1,10}-[0-9]{1,20})$"),
    digest: str | None = Query(None, pattern=r"^[0-9a-f]{64}$"),
    function_index: int | None = Query(None, ge=0, le=2**31 - 1),
    state: list[PlanState] | None = Query(None, description="Only plans in these states"),
    limit: int = Query(50, ge=1, le=1000),
) -> FastJSON:
    """The host's plans, newest first (without their JSON; with their group's function names)."""
    return FastJSON(await plan_views.list_plans(session, host_id, limit, target, digest, function_index, state))


@router.get(
    "/{plan_id}",
    response_model=PlanDetail,
    responses=NOT_FOUND,
    dependencies=[Depends(read_across_nodes)],  # read only: its windows' series from the host's node
)
async def get_plan(host_id: ExistingHost, plan_id: uuid.UUID, session: SessionDep, _: CurrentUser) -> FastJSON:
    """One plan's record: its state and workflow, the install's and revert's details, the root's figures
    before and after the install and the latest interleaved comparison; not its body (GET
    /plans/{id}/body, whose entity tag is `body_etag`)."""
    out = await plan_views.get_plan(session, host_id, plan_id)
    if out is None:
        raise HTTPException(404, "Plan not found")
    return FastJSON(out)


@router.get(
    "/{plan_id}/body",
    response_model=None,
    responses={
        200: {"model": GenPlan, "description": "The agent's plan as the backend checked it"},
        304: {"description": "Not modified: the copy the client holds (If-None-Match) is this body"},
        **NOT_FOUND,
        409: {"model": Message, "description": "The plan is still being made: it has no body yet"},
    },
)
async def get_plan_body(
    host_id: ExistingHost, plan_id: uuid.UUID, request: Request, session: SessionDep, _: CurrentUser
) -> Response:
    """The plan's body: the agent's plan (hotpathd plan --json) as the backend checked it, its shape
    proto/hotpath/v1/plan.schema.json. It never changes once stored, so it is served with its entity
    tag and `Cache-Control: private, max-age=one year, immutable`."""
    row = await plan_records.find(session, host_id, plan_id)
    if row is None:
        raise HTTPException(404, "Plan not found")
    etag = plan_records.body_etag(row)
    if etag is None:
        if row.state == "planning":
            raise HTTPException(409, "The plan is still being made: its body is stored when the agent's plan is")
        raise HTTPException(404, f"The plan has no body: it is {row.state} without a plan from the agent")
    headers = {"ETag": etag, "Cache-Control": IMMUTABLE, "Vary": "Accept-Encoding"}
    if not_modified(request, etag):
        return Response(status_code=304, headers=headers)
    stored = await plan_views.body_text(session, plan_id)
    if stored is None:  # gone between the two reads
        raise HTTPException(404, "Plan not found")
    return quick_gzip_json(request, stored, headers)


@router.get("/{plan_id}/audit", response_model=list[PlanAuditEntry], responses=NOT_FOUND)
async def plan_audit(host_id: ExistingHost, plan_id: uuid.UUID, session: SessionDep, _: CurrentUser) -> FastJSON:
    """Who did what to the plan, and when, oldest first."""
    if await plan_views.get_plan(session, host_id, plan_id) is None:
        raise HTTPException(404, "Plan not found")
    return FastJSON(await plan_views.audit_trail(session, plan_id))


async def _step(coro: Awaitable[dict[str, Any]], session: AsyncSession, runtime: Runtime) -> FastJSON:
    try:
        out = await coro
    except plans.PlanError as exc:
        await session.rollback()
        _fail(exc)
    await session.commit()
    plan_records.publish_state(runtime.hub, out["host_id"], out["id"], out["state"])
    if nodes.active() is not None:
        # The step's record was read in its own transaction, from the coordinator's tables only: read it
        # again, its windows' comparison from the host's node.
        out = await plan_views.get_plan(session, out["host_id"], out["id"]) or out
    return FastJSON(out)


@router.post("/{plan_id}/request", response_model=PlanDetail, responses={**NOT_FOUND, **CONFLICT})
async def request_approval(
    host_id: ExistingHost, plan_id: uuid.UUID, session: SessionDep, runtime: RuntimeDep, user: OperatorUser
) -> FastJSON:
    """Ask for approval of a ready plan."""
    return await _step(runtime.plans.request(session, host_id, plan_id, user.username), session, runtime)


@router.post("/{plan_id}/approve", response_model=PlanDetail, responses={**NOT_FOUND, **CONFLICT, **FORBIDDEN})
async def approve(
    host_id: ExistingHost, plan_id: uuid.UUID, session: SessionDep, runtime: RuntimeDep, user: ApproverUser
) -> FastJSON:
    """Approve a requested plan (not by its requester); the approval names the plan's code hash and
    build id, and only that code is installed."""
    return await _step(runtime.plans.approve(session, host_id, plan_id, user.username), session, runtime)


@router.post("/{plan_id}/reject", response_model=PlanDetail, responses={**NOT_FOUND, **CONFLICT, **FORBIDDEN})
async def reject(
    host_id: ExistingHost,
    plan_id: uuid.UUID,
    body: PlanReject,
    session: SessionDep,
    runtime: RuntimeDep,
    user: ApproverUser,
) -> FastJSON:
    """Reject a requested plan (not by its requester)."""
    return await _step(runtime.plans.reject(session, host_id, plan_id, user.username, body.reason), session, runtime)


@router.post("/{plan_id}/install", response_model=PlanDetail, responses={**NOT_FOUND, **CONFLICT})
async def install(
    host_id: ExistingHost,
    plan_id: uuid.UUID,
    body: PlanInstall,
    session: SessionDep,
    runtime: RuntimeDep,
    user: OperatorUser,
) -> FastJSON:
    """Install an approved plan that still fits its target: the root is measured for `window_s`
    seconds, the agent installs the approved code, with `guard` (a process plan) it is compared with the
    original code in interleaved windows and reverted by the system if slower, and the root is measured
    again."""
    guard = (body.guard_pairs, body.guard_window_seconds) if body.guard else None
    return await _step(
        runtime.plans.install(session, host_id, plan_id, user.username, body.window_s, guard), session, runtime
    )


@router.post("/{plan_id}/compare", response_model=PlanDetail, responses={**NOT_FOUND, **CONFLICT, **FORBIDDEN})
async def compare(
    host_id: ExistingHost,
    plan_id: uuid.UUID,
    body: PlanCompare,
    session: SessionDep,
    runtime: RuntimeDep,
    user: OperatorUser,
) -> FastJSON:
    """Compare an installed process plan with the original code again: interleaved windows with the
    plan reverted and installed, the workload sampled; the plan stays installed. 409 when it is not
    installed or a comparison runs."""
    return await _step(
        runtime.plans.compare(session, host_id, plan_id, user.username, body.pairs, body.window_seconds),
        session,
        runtime,
    )


@router.post("/{plan_id}/revert", response_model=PlanDetail, responses={**NOT_FOUND, **CONFLICT})
async def revert(
    host_id: ExistingHost, plan_id: uuid.UUID, session: SessionDep, runtime: RuntimeDep, user: OperatorUser
) -> FastJSON:
    """Take an installed plan out (call sites first, then the entry)."""
    return await _step(runtime.plans.revert(session, host_id, plan_id, user.username), session, runtime)
