# SPDX-License-Identifier: Apache-2.0
"""Sign-in and the signed-in user. Every attempt, good or bad, is written to the audit log."""
import asyncio

from fastapi import APIRouter, HTTPException, Request, status

from app import crud
from app.api.deps import CurrentUser, RuntimeDep, SessionDep
from app.api.responses import BAD_BODY, SIGNED_IN
from app.core.security import DUMMY_PASSWORD_HASH, create_access_token, verify_password
from app.schemas import LoginRequest, Message, Token, UserPublic

router = APIRouter(prefix="/auth", tags=["auth"])


@router.post("/login", response_model=Token, responses={401: {"model": Message}, **BAD_BODY})
async def login(body: LoginRequest, request: Request, runtime: RuntimeDep, session: SessionDep) -> Token:
    """Exchange a username and password for a bearer token."""
    user = await crud.get_user_by_username(session, body.username)
    # scrypt is deliberately slow: keep it off the event loop.
    ok = await asyncio.to_thread(verify_password, body.password, user.password_hash if user else DUMMY_PASSWORD_HASH)
    client = request.client.host if request.client else None
    if user is None or not ok:
        crud.audit(session, body.username, "login_failed", None, {"client": client})
        await session.commit()
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Incorrect username or password",
                            headers={"WWW-Authenticate": "Bearer"})
    crud.audit(session, user.username, "login", str(user.id), {"client": client})
    await session.commit()
    token = create_access_token(runtime.secret_key, str(user.id), runtime.settings.access_token_minutes)
    return Token(access_token=token, user=UserPublic.model_validate(user))


@router.get("/me", response_model=UserPublic, responses=SIGNED_IN)
async def me(user: CurrentUser) -> UserPublic:
    """The signed-in user."""
    return UserPublic.model_validate(user)
