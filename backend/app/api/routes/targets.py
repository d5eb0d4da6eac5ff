# SPDX-License-Identifier: Apache-2.0
"""A host's targets (the kernel, attached processes) and its commands.

Attaching and detaching are commands for the host's agent: the request is stored and answered at once
(202, the command as it stands), the agent runs it on its worker, and the console follows the command
(its progress, then its end) through GET /commands/{id} or the WebSocket. A request may carry its own
command id: the same id again returns the same command (idempotent). Changing what an agent does needs
the operator role; every request is audited.
"""

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response

from app.api.deps import CurrentUser, RuntimeDep, SessionDep, require_role
from app.api.responses import NOT_FOUND, FastJSON, Responses
from app.api.routes.hosts import ExistingHost
from app.api.schemas import AttachRequest, CommandPublic, Message, TargetPublic
from app.domain import commands
from app.storage import targets
from app.storage.models import User

router = APIRouter(prefix="/hosts/{host_id}", tags=["targets"])
OperatorUser = Annotated[User, Depends(require_role("operator"))]
TargetId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^(kernel|p[0-9]{1,10}-[0-9]{1,20})$")]
CONFLICT: Responses = {409: {"model": Message, "description": "The command id is taken, or the command has ended"}}
ACCEPTED: Responses = {202: {"model": CommandPublic, "description": "The command, stored and on its way to the agent"}}


def command_response(row: dict[str, Any], created: bool) -> Response:
    """202 for a new command, 200 for one that existed with this id."""
    return FastJSON(row, status_code=202 if created else 200)


@router.get("/targets", response_model=list[TargetPublic], responses=NOT_FOUND)
async def list_targets(host_id: ExistingHost, session: SessionDep, _: CurrentUser) -> FastJSON:
    """What the host's agent serves: the kernel and the processes attached (with those that ended)."""
    return FastJSON(await targets.list_targets(session, host_id))


@router.post("/targets", response_model=CommandPublic, responses={**NOT_FOUND, **CONFLICT, **ACCEPTED})
async def attach_target(
    host_id: ExistingHost, body: AttachRequest, session: SessionDep, runtime: RuntimeDep, user: OperatorUser
) -> Response:
    """Attach a running process (by pid, or every process with a command name) as a target."""
    params = {"pid": body.pid} if body.pid is not None else {"command": body.command}
    try:
        row, created = await runtime.commands.create(
            session, host_id, "attach_target", params, user.username, body.command_id
        )
    except commands.CommandError as exc:
        raise HTTPException(exc.status, exc.detail) from None
    await session.commit()
    return command_response(row, created)


@router.delete("/targets/{target_id}", response_model=CommandPublic, responses={**NOT_FOUND, **CONFLICT, **ACCEPTED})
async def detach_target(
    host_id: ExistingHost,
    target_id: TargetId,
    session: SessionDep,
    runtime: RuntimeDep,
    user: OperatorUser,
    command_id: uuid.UUID | None = Query(None),
) -> Response:
    """Detach a process target: its measurements stop (their data is kept)."""
    if target_id == "kernel":
        raise HTTPException(409, "The kernel target cannot be detached")
    if await targets.target_exists(session, host_id, target_id) is None:
        raise HTTPException(404, "Target not found")
    try:
        row, created = await runtime.commands.create(
            session, host_id, "detach_target", {"target": target_id}, user.username, command_id
        )
    except commands.CommandError as exc:
        raise HTTPException(exc.status, exc.detail) from None
    await session.commit()
    return command_response(row, created)


@router.get("/commands", response_model=list[CommandPublic], responses=NOT_FOUND)
async def list_commands(
    host_id: ExistingHost,
    session: SessionDep,
    _: CurrentUser,
    state: Literal["queued", "sent", "running", "done", "failed", "cancelled"] | None = None,
    limit: int = Query(50, ge=1, le=1000),
) -> FastJSON:
    """The host's commands, newest first."""
    return FastJSON(await commands.list_commands(session, host_id, limit, state))


@router.get("/commands/{command_id}", response_model=CommandPublic, responses=NOT_FOUND)
async def get_command(host_id: ExistingHost, command_id: uuid.UUID, session: SessionDep, _: CurrentUser) -> FastJSON:
    """One command: its state, progress and result."""
    row = await commands.get_command(session, host_id, command_id)
    if row is None:
        raise HTTPException(404, "Command not found")
    return FastJSON(row)


@router.post("/commands/{command_id}/cancel", response_model=CommandPublic, responses={**NOT_FOUND, **CONFLICT})
async def cancel_command(
    host_id: ExistingHost, command_id: uuid.UUID, session: SessionDep, runtime: RuntimeDep, user: OperatorUser
) -> FastJSON:
    """Cancel a command: a queued one at once, a sent or running one by asking the agent to stop it."""
    try:
        row = await runtime.commands.cancel(session, host_id, command_id, user.username)
    except commands.CommandError as exc:
        raise HTTPException(exc.status, exc.detail) from None
    await session.commit()
    return FastJSON(row)
