# SPDX-License-Identifier: Apache-2.0
"""Dependencies shared by the routes: a database session, the signed-in user, and role gates.

Roles are ordered viewer < operator < approver < admin; a gate admits its role and every higher one.
"""

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.security import decode_access_token, token_issued_at
from app.runtime import Runtime
from app.storage import nodes, users
from app.storage.models import ROLES, User

_bearer = HTTPBearer(auto_error=False)


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_session(runtime: RuntimeDep) -> AsyncIterator[AsyncSession]:
    async with runtime.sessionmaker() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session)]


async def read_across_nodes(request: Request, session: SessionDep) -> None:
    """A router's reads of a host's series: from the database node the host is placed on (with `b_host`,
    a comparison's other host, from both hosts' databases), when the series are spread over several
    (app.storage.nodes; nothing without). Only for routes whose requests write no series table."""
    hosts = [h for h in (request.path_params.get("host_id"), request.query_params.get("b_host")) if h]
    await nodes.read_across(session, hosts)


_UNAUTHENTICATED = HTTPException(
    status.HTTP_401_UNAUTHORIZED, "Not authenticated", headers={"WWW-Authenticate": "Bearer"}
)


async def user_from_token(runtime: Runtime, session: AsyncSession, token: str | None) -> User | None:
    if not token:
        return None
    subject = decode_access_token(runtime.secret_key, token)
    if subject is None:
        return None
    try:
        user_id = uuid.UUID(subject)
    except ValueError:
        return None
    user = await users.get_user(session, user_id)
    if user is None or user.disabled_at is not None:  # disabled: its tokens stop at once
        return None
    if user.sessions_valid_after is not None:  # a password reset or a disable ended the older tokens
        issued = token_issued_at(runtime.secret_key, token)
        if issued is None or issued < user.sessions_valid_after.timestamp():
            return None
    return user


async def get_current_user(
    runtime: RuntimeDep,
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    user = await user_from_token(runtime, session, credentials.credentials if credentials else None)
    if user is None:
        raise _UNAUTHENTICATED
    return user


CurrentUser = Annotated[User, Depends(get_current_user)]


def require_role(minimum: str) -> Callable[[User], Awaitable[User]]:
    rank = ROLES.index(minimum)

    async def gate(user: CurrentUser) -> User:
        if ROLES.index(user.role) < rank:
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"This needs the {minimum} role")
        return user

    return gate


AdminUser = Annotated[User, Depends(require_role("admin"))]
