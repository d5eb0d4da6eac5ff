# SPDX-License-Identifier: Apache-2.0
"""User management (admin only) and the audit log."""
from fastapi import APIRouter, HTTPException, Query, status

from app import crud
from app.api.deps import AdminUser, SessionDep
from app.api.responses import BAD_BODY
from app.schemas import AuditEntry, Message, UserCreate, UserDetail

router = APIRouter(prefix="/users", tags=["users"])
audit_router = APIRouter(prefix="/audit", tags=["audit"])


@router.get("", response_model=list[UserDetail])
async def list_users(session: SessionDep, _: AdminUser) -> list[UserDetail]:
    """Every user with their role."""
    return [UserDetail.model_validate(u) for u in await crud.list_users(session)]


@router.post("", response_model=UserDetail, status_code=status.HTTP_201_CREATED,
             responses={409: {"model": Message}, **BAD_BODY})
async def create_user(body: UserCreate, session: SessionDep, admin: AdminUser) -> UserDetail:
    """Create a user with a role."""
    if await crud.get_user_by_username(session, body.username) is not None:
        raise HTTPException(status.HTTP_409_CONFLICT, "Username already exists")
    user = await crud.create_user(session, body.username, body.password, body.role)
    crud.audit(session, admin.username, "user_created", str(user.id), {"username": user.username, "role": user.role})
    await session.commit()
    await session.refresh(user)
    return UserDetail.model_validate(user)


@audit_router.get("", response_model=list[AuditEntry])
async def list_audit(session: SessionDep, _: AdminUser, limit: int = Query(100, ge=1, le=1000),
                     action: str | None = None) -> list[AuditEntry]:
    """The newest audit records, optionally of one action."""
    return [AuditEntry.model_validate(a) for a in await crud.list_audit(session, limit, action)]
