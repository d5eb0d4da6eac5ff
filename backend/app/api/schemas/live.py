# SPDX-License-Identifier: Apache-2.0
"""WebSocket messages (added to the OpenAPI document's schemas by app.api.main, so the client has types)."""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from app.api.schemas.commands import CommandKind, CommandState
from app.api.schemas.hosts import HostPublic


# WebSocket messages (added to the OpenAPI document's schemas by app.api.main, so the client has types).
class SamplesTopItem(BaseModel):
    function_id: int
    name: str
    samples: int


class HostEvent(BaseModel):
    type: Literal["host"]
    host: HostPublic


class SamplesEvent(BaseModel):
    type: Literal["samples"]
    host_id: str
    interval_start: datetime
    total_samples: int
    top: list[SamplesTopItem]


class PingEvent(BaseModel):
    type: Literal["ping"]
    at: datetime


class GapEvent(BaseModel):
    type: Literal["gap"]
    host_id: str


class CommandSummary(BaseModel):
    id: str
    host_id: str
    kind: CommandKind
    state: CommandState
    progress: float | None
    message: str
    error: str | None


class CommandEvent(BaseModel):
    type: Literal["command"]
    command: CommandSummary


class TargetsEvent(BaseModel):
    type: Literal["targets"]
    host_id: str


class MeasurementEvent(BaseModel):
    type: Literal["measurement"]
    measurement_id: str
    host_id: str
    interval_start: datetime | None = None
    state: str | None = None


class PlanEvent(BaseModel):
    """A plan of the host changed state (requested, approved, installed, ...): its pages refresh at once."""

    type: Literal["plan"]
    host_id: str
    plan_id: str
    state: str


class Subscribe(BaseModel):
    """What the console sends on the WebSocket: the topics of the views it shows (hosts,
    host:<id>, measurement:<id>); each message replaces the previous set."""

    type: Literal["subscribe"]
    topics: list[str] = Field(max_length=64)


LiveEvent = Annotated[
    HostEvent | SamplesEvent | PingEvent | GapEvent | CommandEvent | TargetsEvent | MeasurementEvent | PlanEvent,
    Field(discriminator="type"),
]
