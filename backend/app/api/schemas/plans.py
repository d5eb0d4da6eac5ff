# SPDX-License-Identifier: Apache-2.0
"""Code positioning plans: requests, their state, windows and comparison, audit trail."""

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PlanState = Literal[
    "planning",
    "ready",
    "failed",
    "cancelled",
    "requested",
    "approved",
    "rejected",
    "installing",
    "installed",
    "install_failed",
    "reverting",
    "reverted",
    "stale",
]


# The longest a hot-set request samples: the agent holds its command worker for that long.
HOT_SET_MAX_SECONDS = 120


class PlanCreate(BaseModel):
    """Ask the host's agent to plan the re-layout of a root function (and its hot callees), or, with
    hot_set, of a process's whole hot set (its threads' PCs sampled for `seconds`; no root: digest, if
    given, names the module, and the first function laid out becomes the plan's root)."""

    model_config = ConfigDict(extra="forbid")
    target: str = Field("kernel", min_length=1, max_length=64, pattern=r"^(kernel|p[0-9]{1,10}-[0-9]{1,20})$")
    digest: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="The root's module (catalog digest)")
    function_index: int | None = Field(None, ge=0, le=2**31 - 1)
    function_id: int | None = Field(None, ge=1, le=2**62, description="Or the root as the console names it")
    seconds: int = Field(0, ge=0, le=600, description="How long to count blocks (0: the agent's default, 10)")
    join_fraction: float = Field(0, ge=0, le=1, description="0: the agent's default (0.05)")
    stall_threshold: float = Field(0, ge=0, le=1, description="0: the agent's default (0.10)")
    max_functions: int = Field(0, ge=0, le=4096, description="0: the agent's default (64)")
    measurement_id: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[0-9A-Za-z_-]+$",
        description="Use this measurement's block counts instead of measuring anew",
    )
    plan_id: uuid.UUID | None = Field(None, description="Idempotency key: the same id returns the same plan")
    hot_set: bool = Field(
        False,
        description="Plan the process's whole hot set from PC samples taken for `seconds` (1 to "
        f"{HOT_SET_MAX_SECONDS}); a process target only; no root (digest alone may name the module)",
    )

    @model_validator(mode="after")
    def _root_named(self) -> "PlanCreate":
        if self.hot_set:
            if self.target == "kernel":
                raise ValueError("a hot-set plan is of a process target: the kernel's hot set is not planned yet")
            if self.function_id is not None or self.function_index is not None or self.measurement_id is not None:
                raise ValueError("a hot-set plan names no root and no measurement (digest alone names the module)")
            if not 1 <= self.seconds <= HOT_SET_MAX_SECONDS:
                raise ValueError(f"a hot-set plan samples for 1 to {HOT_SET_MAX_SECONDS} seconds")
            return self
        if (self.function_id is None) == (self.digest is None or self.function_index is None):
            raise ValueError("name the root by digest and function_index, or by function_id")
        return self


class PlanReject(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=2000, pattern=r"^[^\x00-\x08\x0b-\x1f\x7f]*$")


class PlanCompare(BaseModel):
    """Compare an installed process plan with the original code: `pairs` pairs of windows, one with the
    plan reverted and one with it installed, their order alternating; the workload is sampled, not
    instrumented."""

    model_config = ConfigDict(extra="forbid")
    pairs: int = Field(6, ge=2, le=50, description="Pairs of windows")
    window_seconds: float = Field(1.0, ge=0.2, le=60, description="Each window's length in seconds")


class PlanInstall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    window_s: int = Field(5, ge=1, le=600, description="Seconds the root is measured before and after the install")
    guard: bool = Field(
        True,
        description="A process plan only: compare it with the original code right after the install "
        "(interleaved windows) and revert it when its code takes a larger share of the samples beyond the "
        "95% interval (verdict slower)",
    )
    guard_pairs: int = Field(6, ge=2, le=50, description="The guard's pairs of windows")
    guard_window_seconds: float = Field(1.0, ge=0.2, le=60, description="The guard's window length in seconds")


class PlanPublic(BaseModel):
    id: str
    host_id: str
    target_id: str
    root_digest: str
    root_function_index: int
    root_name: str
    options: dict[str, Any]
    state: PlanState
    error: str | None
    plan_status: str | None = Field(description="The plan's own status: ok, no_counts, not_hot, root_kept, refused")
    estimated: bool = Field(description="Block counts were sampled: the plan's counts are estimates")
    code_sha256: str | None
    build_id: str | None
    target_pid: int | None
    target_start_time: int | None
    target_module: str | None
    kernel_build_id: str | None
    make_command: str | None
    created_by: str
    created_at: datetime
    ready_at: datetime | None
    requested_by: str | None
    requested_at: datetime | None
    approved_by: str | None
    approved_at: datetime | None
    approved_code_sha256: str | None
    approved_build_id: str | None
    rejected_by: str | None
    rejected_at: datetime | None
    reject_reason: str | None
    install_by: str | None
    installed_at: datetime | None
    revert_by: str | None
    reverted_at: datetime | None
    stale_reason: str | None
    window_s: int | None
    before_measurement: str | None
    after_measurement: str | None
    updated_at: datetime
    members: list[str] = Field(
        description="The group's functions by name, root first (the plan's group; empty until the plan is made)"
    )
    hot_set: bool = Field(
        False, description="A whole hot set's plan (PlanCreate.hot_set): members counts its functions"
    )
    derived_from: str | None = Field(
        None,
        description="A roll-out's per-host plan: the approved plan whose approval (code hash, build id) it inherits",
    )
    rollout_id: str | None = Field(None, description="The roll-out that installed this plan on this host")


class PlanSpread(BaseModel):
    min: float
    max: float
    intervals: int = Field(description="How many of the window's intervals the range is over")


class PlanWindow(BaseModel):
    measurement_id: str
    state: str
    detail: str
    seconds: float
    calls: float | None
    calls_per_s: float | None
    wall_ns_per_call: float | None
    vtime_ns_per_call: float | None
    cycles_per_call: float | None = None
    instructions_per_call: float | None = None
    icache_stall_per_call: float | None = None
    branch_mispredict_per_call: float | None = None
    unavailable: dict[str, str] = Field(description="Metrics the host could not measure, with the reason")
    spread: dict[str, PlanSpread] = Field(
        default_factory=dict, description="Per figure, its range over the window's intervals"
    )


class PlanComparison(BaseModel):
    before: PlanWindow | None
    after: PlanWindow | None
    change: dict[str, float | None] = Field(description="(after - before) / before per figure")
    emulated: str | None = Field(
        default=None,
        description="Set when the host's CPU is emulated in software (QEMU's TCG names its CPU so): every time "
        "in the windows is then labelled with this text, as it is not a performance figure",
    )


class CompareWindow(BaseModel):
    pair: int
    arm: Literal["original", "installed"]
    start_unix_ns: int
    seconds: float
    samples: int = Field(description="The process's PC samples in the window")
    samples_in_plan: int = Field(description="Those in the plan's code (its members' originals or the copy)")
    cpu_seconds: float = Field(description="The process's CPU time in the window")


class ComparePairShares(BaseModel):
    pair: int
    original: float | None = Field(description="Share of the original window's samples in the plan's code")
    installed: float | None = Field(description="Share of the installed window's samples in the plan's code")
    used: bool = Field(description="Both windows had samples: the pair counts in the summary")


class CompareSummary(BaseModel):
    """Computed by the backend from the windows (the agent's summary is not used)."""

    share_original: float | None
    share_installed: float | None
    change: float | None = Field(description="(mean installed - mean original share) / mean original share")
    interval: list[float] | None = Field(description="The change's confidence interval [low, high]")
    confidence: float
    verdict: Literal["faster", "slower", "within_noise", "insufficient"]
    pairs_used: int


class PlanInterleaved(BaseModel):
    """The plan's latest interleaved comparison with the original code."""

    id: str
    command_id: str
    requested_by: str
    guard: bool = Field(description="Run by the guard after the install (a slower verdict reverts the plan)")
    pairs: int
    window_seconds: float
    state: Literal["running", "done", "failed"]
    progress: float | None
    message: str | None
    error: str | None
    windows: list[CompareWindow]
    pair_shares: list[ComparePairShares]
    summary: CompareSummary | None
    guard_action: Literal["reverted", "kept"] | None
    guard_reason: str | None
    created_at: datetime
    finished_at: datetime | None


class PlanDetail(PlanPublic):
    """A plan's record, polled while the agent works on it: everything but its body (the agent's plan,
    up to 16 MiB, served once by GET .../plans/{id}/body)."""

    body_etag: str | None = Field(
        description="The entity tag of the plan's body (GET .../plans/{id}/body), which never changes once "
        "stored; null while the plan has no body (planning, or failed before the agent's plan was stored)"
    )
    install_detail: dict[str, Any] | None
    revert_detail: dict[str, Any] | None
    install_command: str | None
    revert_command: str | None
    comparison: PlanComparison | None = Field(
        description="The root's uprobe-timed windows before and after the install (instrumented figures)"
    )
    interleaved: PlanInterleaved | None = Field(
        description="The latest interleaved comparison with the original code (sampled, uninstrumented)"
    )


class PlanAuditEntry(BaseModel):
    id: int
    at: datetime
    actor: str
    action: str
    target: str | None
    detail: dict[str, Any]
