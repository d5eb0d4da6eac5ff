# SPDX-License-Identifier: Apache-2.0
"""Staged roll-outs of an approved plan over the hosts of its build (app.domain.rollouts).

Starting, pausing, resuming and reverting a roll-out install or revert plans: they need the operator role,
as installing a plan does (the plan itself must have been approved by someone other than its requester
and maker, and its code hash and build id must still be the approved ones). Reading needs a signed-in user.
"""

import uuid
from typing import NoReturn

from fastapi import APIRouter, HTTPException, Query

from app.api.deps import CurrentUser, RuntimeDep, SessionDep
from app.api.responses import NOT_FOUND, FastJSON, Responses
from app.api.routes.plans import CONFLICT, OperatorUser
from app.api.schemas import Message
from app.api.schemas.rollouts import RolloutAuditEntry, RolloutCreate, RolloutDetail, RolloutPublic
from app.domain import rollouts

router = APIRouter(prefix="/rollouts", tags=["rollouts"])
REFUSED: Responses = {
    409: {"model": Message, "description": "The plan is not approved as it is, or a host is of another build or taken"}
}


def _fail(exc: rollouts.RolloutError) -> NoReturn:
    raise HTTPException(exc.status, exc.detail) from None


@router.post("", response_model=RolloutDetail, status_code=201, responses={**NOT_FOUND, **REFUSED})
async def start_rollout(body: RolloutCreate, session: SessionDep, runtime: RuntimeDep, user: OperatorUser) -> FastJSON:
    """Start rolling an approved plan out to the hosts of its build, a canary first, then growing waves;
    each host gets a per-host plan that inherits the approval (same code hash and build id) and is
    installed with the guard. 409 with the reasons when the plan is not approved as it is, a named host is
    of another build, or another plan or roll-out holds a host."""
    settings = {
        "window_s": body.window_s,
        "guard_pairs": body.guard_pairs,
        "guard_window_seconds": body.guard_window_seconds,
        "offline_wait_s": body.offline_wait_s,
    }
    try:
        rid = await runtime.rollouts.create(
            session, body.host_id, body.plan_id, user.username, body.labels, body.hosts, body.wave_sizes, settings
        )
    except rollouts.RolloutError as exc:
        await session.rollback()
        _fail(exc)
    await session.commit()
    runtime.rollouts.spawn(rid)
    return FastJSON(await rollouts.get_rollout(session, rid), status_code=201)


@router.get("", response_model=list[RolloutPublic])
async def list_rollouts(
    session: SessionDep,
    _: CurrentUser,
    plan_id: uuid.UUID | None = Query(None, description="Only roll-outs of this plan"),
    limit: int = Query(50, ge=1, le=500),
) -> FastJSON:
    """Roll-outs, newest first."""
    return FastJSON(await rollouts.list_rollouts(session, plan_id, limit))


@router.get("/{rollout_id}", response_model=RolloutDetail, responses=NOT_FOUND)
async def get_rollout(rollout_id: uuid.UUID, session: SessionDep, _: CurrentUser) -> FastJSON:
    """One roll-out: its state and reason, its waves, and each host's state, reason, per-host plan and
    the before/after figures of its guard's comparison."""
    out = await rollouts.get_rollout(session, rollout_id)
    if out is None:
        raise HTTPException(404, "Roll-out not found")
    return FastJSON(out)


@router.get("/{rollout_id}/audit", response_model=list[RolloutAuditEntry], responses=NOT_FOUND)
async def rollout_audit(rollout_id: uuid.UUID, session: SessionDep, _: CurrentUser) -> FastJSON:
    """Who did what to the roll-out, and what the system did, oldest first."""
    if await rollouts.get_rollout(session, rollout_id) is None:
        raise HTTPException(404, "Roll-out not found")
    return FastJSON(await rollouts.audit_trail(session, rollout_id))


async def _act(action: str, rollout_id: uuid.UUID, session: SessionDep, runtime: RuntimeDep, actor: str) -> FastJSON:
    try:
        await getattr(runtime.rollouts, action)(session, rollout_id, actor)
    except rollouts.RolloutError as exc:
        await session.rollback()
        _fail(exc)
    await session.commit()
    runtime.rollouts.spawn(rollout_id)
    return FastJSON(await rollouts.get_rollout(session, rollout_id))


@router.post("/{rollout_id}/pause", response_model=RolloutDetail, responses={**NOT_FOUND, **CONFLICT})
async def pause(rollout_id: uuid.UUID, session: SessionDep, runtime: RuntimeDep, user: OperatorUser) -> FastJSON:
    """Start no further host; hosts in flight still answer."""
    return await _act("pause", rollout_id, session, runtime, user.username)


@router.post("/{rollout_id}/resume", response_model=RolloutDetail, responses={**NOT_FOUND, **CONFLICT})
async def resume(rollout_id: uuid.UUID, session: SessionDep, runtime: RuntimeDep, user: OperatorUser) -> FastJSON:
    """Go on with a paused roll-out."""
    return await _act("resume", rollout_id, session, runtime, user.username)


@router.post("/{rollout_id}/revert", response_model=RolloutDetail, responses={**NOT_FOUND, **CONFLICT})
async def revert(rollout_id: uuid.UUID, session: SessionDep, runtime: RuntimeDep, user: OperatorUser) -> FastJSON:
    """Revert everywhere: every host's installed per-host plan is reverted (hosts in flight once they
    answer), hosts not started are skipped; the roll-out ends reverted."""
    return await _act("revert", rollout_id, session, runtime, user.username)
