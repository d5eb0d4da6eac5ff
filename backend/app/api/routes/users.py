# SPDX-License-Identifier: Apache-2.0
"""User management (admin only): create, change role, disable or enable, reset password; and the audit
log. Every change is audited with who made it. No change may leave the installation without an enabled
admin (409)."""

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status
from sqlalchemy import select

from app.api.deps import AdminUser, SessionDep
from app.api.responses import BAD_BODY, NOT_FOUND
from app.api.schemas import AuditEntry, Message, PasswordReset, UserCreate, UserDetail, UserUpdate
from app.core.security import hash_password
from app.storage import audit_log, users
from app.storage.models import User

UserId = Annotated[uuid.UUID, Path(description="A user's id")]

router = APIRouter(prefix="/users", tags=["users"])
audit_router = APIRouter(prefix="/audit", tags=["audit"])


@router.get("", response_model=list[UserDetail])
async def list_users(session: SessionDep, _: AdminUser) -> list[UserDetail]:
    """Every user with their role."""
    return [UserDetail.model_validate(u) for u in await users.list_users(session)]


@router.post(
    "", response_model=UserDetail, status_code=status.HTTP_201_CREATED, responses={409: {"model": Message}, **BAD_BODY}
)
async def create_user(body: UserCreate, session: SessionDep, admin: AdminUser) -> UserDetail:
    """Create a user with a role."""
    if await users.get_user_by_username(session, body.username) is not None:
        raise HTTPException(status.HTTP_409_CONFLICT, "Username already exists")
    user = await users.create_user(session, body.username, body.password, body.role)
    audit_log.record(
        session, admin.username, "user_created", str(user.id), {"username": user.username, "role": user.role}
    )
    await session.commit()
    await session.refresh(user)
    return UserDetail.model_validate(user)


async def _user(session: SessionDep, user_id: uuid.UUID) -> User:
    user = (await session.execute(select(User).where(User.id == user_id).with_for_update())).scalar_one_or_none()
    if user is None:
        raise HTTPException(404, "User not found")
    return user


@router.patch("/{user_id}", response_model=UserDetail, responses={409: {"model": Message}, **NOT_FOUND, **BAD_BODY})
async def update_user(user_id: UserId, body: UserUpdate, session: SessionDep, admin: AdminUser) -> UserDetail:
    """Change a user's role, or disable or enable the user."""
    admins = await users.enabled_admin_ids_locked(session)
    user = await _user(session, user_id)
    role = body.role if body.role is not None else user.role
    disabled = body.disabled if body.disabled is not None else user.disabled_at is not None
    if user.id in admins and (role != "admin" or disabled) and len(admins) <= 1:
        raise HTTPException(status.HTTP_409_CONFLICT, "This is the last enabled admin: make another admin first")
    if role != user.role:
        audit_log.record(
            session,
            admin.username,
            "user_role_changed",
            str(user.id),
            {"username": user.username, "from": user.role, "to": role},
        )
        user.role = role
    if disabled != (user.disabled_at is not None):
        user.disabled_at = datetime.now(UTC) if disabled else None
        if disabled:  # enabling again does not revive the tokens issued before
            user.sessions_valid_after = user.disabled_at
        audit_log.record(
            session,
            admin.username,
            "user_disabled" if disabled else "user_enabled",
            str(user.id),
            {"username": user.username},
        )
    await session.commit()
    await session.refresh(user)
    return UserDetail.model_validate(user)


@router.post("/{user_id}/password", status_code=status.HTTP_204_NO_CONTENT, responses={**NOT_FOUND, **BAD_BODY})
async def reset_password(user_id: UserId, body: PasswordReset, session: SessionDep, admin: AdminUser) -> None:
    """Set a user's password, end the user's existing tokens and clear a sign-in lockout."""
    user = await _user(session, user_id)
    # scrypt is deliberately slow: keep it off the event loop.
    user.password_hash = await asyncio.to_thread(hash_password, body.password)
    user.failed_logins, user.locked_until = 0, None
    user.sessions_valid_after = datetime.now(UTC)  # tokens issued with the old password stop working
    audit_log.record(session, admin.username, "user_password_reset", str(user.id), {"username": user.username})
    await session.commit()


@audit_router.get("", response_model=list[AuditEntry])
async def list_audit(
    session: SessionDep, _: AdminUser, limit: int = Query(100, ge=1, le=1000), action: str | None = None
) -> list[AuditEntry]:
    """The newest audit records, optionally of one action."""
    return [AuditEntry.model_validate(a) for a in await audit_log.recent(session, limit, action)]
