# SPDX-License-Identifier: Apache-2.0
"""Shapes every part of the API uses: errors, health, the time range of a read."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Message(BaseModel):
    detail: str


class HealthStatus(BaseModel):
    status: Literal["ok"]


class RangePublic(BaseModel):
    """The absolute time range a sample response covers: [from, to), and its length in seconds (the
    divisor of every per-second rate in the response)."""

    model_config = ConfigDict(populate_by_name=True)
    from_: datetime = Field(alias="from")
    to: datetime
    seconds: float
