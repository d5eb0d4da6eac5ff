# SPDX-License-Identifier: Apache-2.0
"""Staged roll-outs of an approved plan (app.domain.rollouts): the request, the record with its waves
and hosts, each host's guard figures."""

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.protocol.labels import MAX_LABELS, InvalidLabels, check_labels

RolloutState = Literal["running", "paused", "halted", "completed", "reverting", "reverted"]
RolloutHostState = Literal["pending", "installing", "comparing", "installed", "reverted", "skipped", "failed"]


class RolloutCreate(BaseModel):
    """Roll an approved plan out to the hosts of its build (narrowed by labels and, when given, to the
    hosts named), in waves: a canary of one host first, then `wave_sizes` (the last size repeats; the
    default doubles: 1, 2, 4, 8...). Each host's install runs with the guard (a process plan)."""

    model_config = ConfigDict(extra="forbid")
    host_id: str = Field(min_length=1, max_length=255, description="The host the approved plan was made on")
    plan_id: uuid.UUID
    labels: dict[str, str] = Field(
        default_factory=dict, max_length=MAX_LABELS, description="Only hosts carrying every one of these labels"
    )
    hosts: list[str] | None = Field(
        None, min_length=1, max_length=10_000, description="Only these hosts (each must be of the plan's build)"
    )
    wave_sizes: list[int] | None = Field(
        None, min_length=1, max_length=64, description="Hosts per wave; the first is the canary and must be 1"
    )
    window_s: int = Field(5, ge=1, le=600, description="Seconds the root is measured before and after each install")
    guard_pairs: int = Field(6, ge=2, le=50, description="The guard's pairs of interleaved windows (process plans)")
    guard_window_seconds: float = Field(1.0, ge=0.2, le=60, description="The guard's window length in seconds")
    offline_wait_s: float = Field(
        60.0, ge=1, le=3600, description="How long a wave waits for a host that went offline before skipping it"
    )

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        try:
            return check_labels(v.items(), "the label filter")
        except InvalidLabels as exc:
            raise ValueError(str(exc)) from None

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        for h in v:
            if not 1 <= len(h) <= 255 or any(ord(c) < 32 or ord(c) == 127 for c in h):
                raise ValueError("a host id is 1 to 255 characters without control characters")
        if len(set(v)) != len(v):
            raise ValueError("a host is named twice")
        return v

    @field_validator("wave_sizes")
    @classmethod
    def _sizes(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        if v[0] != 1:
            raise ValueError("the first wave is the canary: one host")
        if any(not 1 <= n <= 10_000 for n in v):
            raise ValueError("a wave has 1 to 10000 hosts")
        return v


class RolloutGuard(BaseModel):
    state: str
    action: str | None
    verdict: str | None
    share_original: float | None
    share_installed: float | None
    change: float | None
    interval: list[float] | None
    confidence: float | None = Field(None, description="The interval's confidence (0.95: a 95% interval)")


class RolloutHost(BaseModel):
    host_id: str
    hostname: str
    online: bool
    wave: int
    target_id: str
    plan_id: str | None
    plan_state: str | None
    state: RolloutHostState
    reason: str | None
    offline_since: datetime | None
    updated_at: datetime
    guard: RolloutGuard | None


class RolloutWave(BaseModel):
    wave: int
    size: int
    states: dict[str, int]


class RolloutPublic(BaseModel):
    id: str
    plan_id: str
    plan_host_id: str
    kind: Literal["kernel", "process"]
    build_id: str
    code_sha256: str
    requested_by: str
    labels: dict[str, Any]
    wave_sizes: list[int]
    window_s: int | None
    guard_pairs: int | None
    guard_window_seconds: float | None
    offline_wait_s: float | None
    state: RolloutState
    reason: str | None
    wave: int
    host_count: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class RolloutDetail(RolloutPublic):
    hosts: list[RolloutHost]
    waves: list[RolloutWave]


class RolloutAuditEntry(BaseModel):
    at: datetime
    actor: str
    action: str
    detail: dict[str, Any]
