# SPDX-License-Identifier: Apache-2.0
"""Targets (the kernel, attached processes) and the commands sent to agents."""

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.domain.commands import CommandKind as CommandKind  # the one list of kinds, re-exported for the API

TargetKind = Literal["kernel", "process"]


TargetState = Literal["attached", "exited", "detached", "gone"]


class TargetPublic(BaseModel):
    id: str = Field(description='"kernel", or "p<pid>-<start time>" for a process')
    kind: TargetKind
    pid: int | None
    command: str
    executable: str
    state: TargetState
    detail: str
    attached_at: datetime | None
    ended_at: datetime | None
    module_count: int
    active_measurements: int


class AttachRequest(BaseModel):
    """Attach a running process by pid, or every process with a command name."""

    model_config = ConfigDict(extra="forbid")
    pid: int | None = Field(None, ge=1, le=2**30)
    command: str | None = Field(None, min_length=1, max_length=15, pattern=r"^[^\x00-\x1f\x7f]+$")
    command_id: uuid.UUID | None = Field(None, description="Idempotency key: the same id returns the same command")

    @model_validator(mode="after")
    def _one_of(self) -> "AttachRequest":
        if (self.pid is None) == (self.command is None):
            raise ValueError("give either pid or command")
        return self


CommandState = Literal["queued", "sent", "running", "done", "failed", "cancelled"]


class CommandPublic(BaseModel):
    id: str
    host_id: str
    kind: CommandKind
    params: dict[str, Any]
    state: CommandState
    progress: float | None = Field(description="Completed fraction the agent reported, 0..1")
    message: str = Field(description="What the agent is doing, as it last reported")
    result: dict[str, Any] | None
    error: str | None
    created_by: str
    created_at: datetime
    sent_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested: bool


class CommandRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command_id: uuid.UUID | None = Field(None, description="Idempotency key: the same id returns the same command")
