# SPDX-License-Identifier: Apache-2.0
"""Sign-in and the signed-in user. Every attempt, good or bad, is written to the audit log.

Guessing is slowed two ways: each client address may try `login_attempts_per_minute` times a minute
(429 beyond), and an account is locked for `login_lockout_s` after `login_failures_before_lockout`
failures in a row (429 until then, whatever the password; a success resets the count). Unknown
usernames are counted the same way in memory, so the answers do not tell which names exist.
"""
import asyncio
import time
from collections import deque
from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, HTTPException, Request, status

from app import crud
from app.api.deps import CurrentUser, RuntimeDep, SessionDep
from app.api.responses import BAD_BODY, SIGNED_IN
from app.core.security import DUMMY_PASSWORD_HASH, create_access_token, verify_password
from app.schemas import LoginRequest, Message, Token, UserPublic

router = APIRouter(prefix="/auth", tags=["auth"])
_attempts: dict[str, deque[float]] = {}  # client address -> times of recent attempts
_unknown_failures: dict[str, tuple[int, float]] = {}  # unknown username -> (failures, locked until)


def _too_many(client: str, per_minute: int) -> bool:
    now = time.monotonic()
    window = _attempts.setdefault(client, deque())
    while window and now - window[0] > 60:
        window.popleft()
    if len(window) >= per_minute:
        return True
    window.append(now)
    if len(_attempts) > 10000:  # forget idle clients
        for key in [k for k, v in _attempts.items() if not v or now - v[-1] > 60]:
            _attempts.pop(key, None)
    return False


def _locked(seconds: float) -> HTTPException:
    return HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                         f"Too many failed sign-ins; try again in {max(1, int(seconds))} s",
                         headers={"Retry-After": str(max(1, int(seconds)))})


@router.post("/login", response_model=Token,
             responses={401: {"model": Message}, 403: {"model": Message}, 429: {"model": Message}, **BAD_BODY})
async def login(body: LoginRequest, request: Request, runtime: RuntimeDep, session: SessionDep) -> Token:
    """Exchange a username and password for a bearer token."""
    settings = runtime.settings
    client = request.client.host if request.client else "unknown"
    if _too_many(client, settings.login_attempts_per_minute):
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, "Too many sign-in attempts from this address",
                            headers={"Retry-After": "60"})
    user = await crud.get_user_by_username(session, body.username)
    now = datetime.now(UTC)
    if user is not None and user.locked_until is not None and user.locked_until > now:
        raise _locked((user.locked_until - now).total_seconds())
    if user is None:
        failures, until = _unknown_failures.get(body.username, (0, 0.0))
        if until > time.monotonic():
            raise _locked(until - time.monotonic())
    # scrypt is deliberately slow: keep it off the event loop.
    ok = await asyncio.to_thread(verify_password, body.password, user.password_hash if user else DUMMY_PASSWORD_HASH)
    if user is None or not ok:
        limit = settings.login_failures_before_lockout
        if user is not None:
            user.failed_logins += 1
            if user.failed_logins >= limit:
                user.locked_until = now + timedelta(seconds=settings.login_lockout_s)
                user.failed_logins = 0
                crud.audit(session, body.username, "login_locked", str(user.id),
                           {"client": client, "seconds": settings.login_lockout_s})
        else:
            failures += 1
            locked = time.monotonic() + settings.login_lockout_s if failures >= limit else 0.0
            _unknown_failures[body.username] = (0 if locked else failures, locked)
            if len(_unknown_failures) > 10000:
                _unknown_failures.clear()
        crud.audit(session, body.username, "login_failed", None, {"client": client})
        await session.commit()
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Incorrect username or password",
                            headers={"WWW-Authenticate": "Bearer"})
    if user.disabled_at is not None:
        crud.audit(session, user.username, "login_failed", str(user.id), {"client": client, "reason": "disabled"})
        await session.commit()
        raise HTTPException(status.HTTP_403_FORBIDDEN, "This account is disabled")
    user.failed_logins, user.locked_until = 0, None
    crud.audit(session, user.username, "login", str(user.id), {"client": client})
    await session.commit()
    token = create_access_token(runtime.secret_key, str(user.id), settings.access_token_minutes)
    return Token(access_token=token, user=UserPublic.model_validate(user))


@router.get("/me", response_model=UserPublic, responses=SIGNED_IN)
async def me(user: CurrentUser) -> UserPublic:
    """The signed-in user."""
    return UserPublic.model_validate(user)
