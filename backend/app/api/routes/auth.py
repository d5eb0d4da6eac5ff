# SPDX-License-Identifier: Apache-2.0
"""Sign-in and the signed-in user. Every attempt, good or bad, is written to the audit log.

Guessing is slowed two ways: each client address may try `login_attempts_per_minute` times a minute
(429 beyond), and an account is locked for `login_lockout_s` after `login_failures_before_lockout`
failures in a row (429 until then, whatever the password; a success resets the count). The count is
raised atomically before the password is checked, so parallel attempts cannot share a number. Unknown
usernames are counted the same way in memory, so the answers do not tell which names exist.
"""

import asyncio
import time
from collections import deque
from datetime import UTC, datetime

from fastapi import APIRouter, HTTPException, Request, status
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.deps import CurrentUser, RuntimeDep, SessionDep
from app.api.responses import BAD_BODY, SIGNED_IN
from app.api.schemas import LoginRequest, Message, Token, UserPublic
from app.core.security import DUMMY_PASSWORD_HASH, create_access_token, verify_password
from app.storage import audit_log, users
from app.storage.models import User

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
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS,
        f"Too many failed sign-ins; try again in {max(1, int(seconds))} s",
        headers={"Retry-After": str(max(1, int(seconds)))},
    )


async def _lock_user(session: AsyncSession, user: User, username: str, client: str, seconds: float) -> None:
    """Lock an account that is not locked yet (audited once per lock), and restart its count."""
    locked = (
        await session.execute(
            text("""
        UPDATE users SET locked_until = now() + make_interval(secs => :s), failed_logins = 0
        WHERE id = :id AND (locked_until IS NULL OR locked_until <= now()) RETURNING id"""),
            {"id": user.id, "s": seconds},
        )
    ).scalar_one_or_none()
    if locked is not None:
        audit_log.record(session, username, "login_locked", str(user.id), {"client": client, "seconds": seconds})


@router.post(
    "/login",
    response_model=Token,
    responses={401: {"model": Message}, 403: {"model": Message}, 429: {"model": Message}, **BAD_BODY},
)
async def login(body: LoginRequest, request: Request, runtime: RuntimeDep, session: SessionDep) -> Token:
    """Exchange a username and password for a bearer token."""
    settings = runtime.settings
    client = request.client.host if request.client else "unknown"
    if _too_many(client, settings.login_attempts_per_minute):
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            "Too many sign-in attempts from this address",
            headers={"Retry-After": "60"},
        )
    user = await users.get_user_by_username(session, body.username)
    limit = settings.login_failures_before_lockout
    lockout = settings.login_lockout_s
    # Each attempt is counted as a failure BEFORE the (slow) password check and cleared on success, so
    # attempts running in parallel each take their own number: the first `limit` are checked, any beyond
    # lock the account unchecked. Counting after the check let 25 parallel guesses all be checked.
    if user is not None:
        reserved = (
            await session.execute(
                text("""
            UPDATE users SET failed_logins = failed_logins + 1
            WHERE id = :id AND (locked_until IS NULL OR locked_until <= now())
            RETURNING failed_logins"""),
                {"id": user.id},
            )
        ).scalar_one_or_none()
        if reserved is None or reserved > limit:
            await _lock_user(session, user, body.username, client, lockout)
            until = (
                await session.execute(text("SELECT locked_until FROM users WHERE id = :id"), {"id": user.id})
            ).scalar_one_or_none()
            await session.commit()
            raise _locked((until - datetime.now(UTC)).total_seconds() if until else lockout)
        await session.commit()  # visible to the attempts in parallel before the slow check below
        attempt = reserved
    else:
        failures, until = _unknown_failures.get(body.username, (0, 0.0))
        if until > time.monotonic():
            raise _locked(until - time.monotonic())
        attempt = failures + 1
        if attempt > limit:
            _unknown_failures[body.username] = (0, time.monotonic() + lockout)
            raise _locked(lockout)
        _unknown_failures[body.username] = (attempt, 0.0)
        if len(_unknown_failures) > 10000:
            _unknown_failures.clear()
    # scrypt is deliberately slow: keep it off the event loop.
    ok = await asyncio.to_thread(verify_password, body.password, user.password_hash if user else DUMMY_PASSWORD_HASH)
    if user is None or not ok:
        if attempt >= limit:
            if user is not None:
                await _lock_user(session, user, body.username, client, lockout)
            else:
                _unknown_failures[body.username] = (0, time.monotonic() + lockout)
        audit_log.record(session, body.username, "login_failed", None, {"client": client})
        await session.commit()
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "Incorrect username or password", headers={"WWW-Authenticate": "Bearer"}
        )
    if user.disabled_at is not None:
        audit_log.record(session, user.username, "login_failed", str(user.id), {"client": client, "reason": "disabled"})
        await session.commit()
        raise HTTPException(status.HTTP_403_FORBIDDEN, "This account is disabled")
    await session.execute(
        text("UPDATE users SET failed_logins = 0, locked_until = NULL WHERE id = :id"), {"id": user.id}
    )
    audit_log.record(session, user.username, "login", str(user.id), {"client": client})
    await session.commit()
    token = create_access_token(runtime.secret_key, str(user.id), settings.access_token_minutes)
    return Token(access_token=token, user=UserPublic.model_validate(user))


@router.get("/me", response_model=UserPublic, responses=SIGNED_IN)
async def me(user: CurrentUser) -> UserPublic:
    """The signed-in user."""
    return UserPublic.model_validate(user)
