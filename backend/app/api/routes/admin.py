# SPDX-License-Identifier: Apache-2.0
"""Host identity, for admins: one-time enrolment tokens, pending enrolments to approve or reject,
and retiring or deleting hosts. Every action is audited."""

import uuid
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, status

from app.api.deps import AdminUser, RuntimeDep, SessionDep
from app.api.responses import BAD_BODY, NOT_FOUND
from app.api.routes.hosts import HostId
from app.api.schemas import (
    EnrolmentRejected,
    EnrolmentRejectMany,
    EnrolmentRequestPublic,
    EnrolmentTokenCreate,
    EnrolmentTokenCreated,
    EnrolmentTokenPublic,
    Message,
)
from app.domain import enrolment

router = APIRouter(tags=["admin"])
TokenId = Annotated[uuid.UUID, Path(description="An enrolment token's id")]
RequestId = Annotated[uuid.UUID, Path(description="An enrolment request's id")]


@router.post(
    "/enrolment-tokens", response_model=EnrolmentTokenCreated, status_code=status.HTTP_201_CREATED, responses=BAD_BODY
)
async def create_enrolment_token(
    body: EnrolmentTokenCreate, session: SessionDep, runtime: RuntimeDep, admin: AdminUser
) -> EnrolmentTokenCreated:
    """Create a one-time enrolment token (shown only in this answer) with the CA agents trust."""
    token, secret = await enrolment.create_token(session, admin.username, body.note, body.hours, body.host_id)
    await session.commit()
    await session.refresh(token)
    return EnrolmentTokenCreated(
        **EnrolmentTokenPublic.model_validate(token).model_dump(),
        token=secret,
        ca_pem=runtime.pki.ca_pem.decode(),
        enroll_port=runtime.enroll_port,
    )


@router.get("/enrolment-tokens", response_model=list[EnrolmentTokenPublic])
async def list_enrolment_tokens(session: SessionDep, _: AdminUser) -> list[EnrolmentTokenPublic]:
    """The newest enrolment tokens with whether they were used, revoked or expired (never the secret)."""
    return [EnrolmentTokenPublic.model_validate(t) for t in await enrolment.list_tokens(session)]


@router.delete("/enrolment-tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT, responses=NOT_FOUND)
async def revoke_enrolment_token(token_id: TokenId, session: SessionDep, admin: AdminUser) -> None:
    """Revoke an unused enrolment token."""
    if not await enrolment.revoke_token(session, token_id, admin.username):
        raise HTTPException(404, "Enrolment token not found")


@router.get("/enrolment-requests", response_model=list[EnrolmentRequestPublic])
async def list_enrolment_requests(
    session: SessionDep, runtime: RuntimeDep, _: AdminUser
) -> list[EnrolmentRequestPublic]:
    """Keys that asked to enrol a host id without a token, pending or decided, with their fingerprints."""
    rows = await enrolment.list_requests(session, runtime.settings.enrolment_request_ttl_s)
    return [EnrolmentRequestPublic.model_validate(r) for r in rows]


@router.post("/enrolment-requests/reject", response_model=EnrolmentRejected, responses=BAD_BODY)
async def reject_enrolments(body: EnrolmentRejectMany, session: SessionDep, admin: AdminUser) -> EnrolmentRejected:
    """Reject many pending requests at once: the ones listed, or all of them."""
    ids = None if body.all_pending else body.request_ids
    return EnrolmentRejected(rejected=await enrolment.reject_many(session, ids, admin.username))


async def _decide(session: SessionDep, request_id: uuid.UUID, approve: bool, actor: str) -> EnrolmentRequestPublic:
    try:
        request = await enrolment.decide(session, request_id, approve, actor)
    except enrolment.DecisionError as exc:
        raise HTTPException(exc.status, str(exc)) from None
    return EnrolmentRequestPublic.model_validate(await enrolment.get_request(session, request.id))


@router.post(
    "/enrolment-requests/{request_id}/approve",
    response_model=EnrolmentRequestPublic,
    responses={409: {"model": Message}, **NOT_FOUND},
)
async def approve_enrolment(request_id: RequestId, session: SessionDep, admin: AdminUser) -> EnrolmentRequestPublic:
    """Approve a pending request: its key receives a certificate the next time it asks; other keys pending
    for the same host id are rejected. A host that is enrolled already cannot be approved (409)."""
    return await _decide(session, request_id, True, admin.username)


@router.post("/enrolment-requests/{request_id}/reject", response_model=EnrolmentRequestPublic, responses=NOT_FOUND)
async def reject_enrolment(request_id: RequestId, session: SessionDep, admin: AdminUser) -> EnrolmentRequestPublic:
    """Reject a pending request."""
    return await _decide(session, request_id, False, admin.username)


@router.post("/hosts/{host_id}/retire", status_code=status.HTTP_204_NO_CONTENT, responses=NOT_FOUND)
async def retire_host(host_id: HostId, session: SessionDep, runtime: RuntimeDep, admin: AdminUser) -> None:
    """Retire a host: its certificate stops working and its stream ends; its data stays."""
    if not await enrolment.retire_host(runtime.agents, session, host_id, admin.username):
        raise HTTPException(404, "Host not found")


@router.delete("/hosts/{host_id}", status_code=status.HTTP_204_NO_CONTENT, responses=NOT_FOUND)
async def delete_host(host_id: HostId, session: SessionDep, runtime: RuntimeDep, admin: AdminUser) -> None:
    """Delete a host with its samples, gaps and modules (shared catalog pieces stay)."""
    if not await enrolment.delete_host(runtime.agents, session, host_id, admin.username):
        raise HTTPException(404, "Host not found")
