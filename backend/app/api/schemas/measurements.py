# SPDX-License-Identifier: Apache-2.0
"""Measurements: their requests, state, values, series and measured control-flow graphs."""

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.api.schemas.common import RangePublic
from app.protocol.measurement_request import MeasurementRequest, ResourceRequest

MetricName = Literal[
    "count", "wall", "vtime", "concurrency", "cycles", "instructions", "icache_stall", "branch_mispredict"
]


class ResourceRefIn(BaseModel):
    """A code resource by catalog identity: a function, one of its blocks, or an instruction address.
    The module is its catalog digest, or (more compact for long requests) its position in the request's
    `modules`."""

    model_config = ConfigDict(extra="forbid")
    digest: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    module: int | None = Field(None, ge=0, le=255, description="Position of the digest in the request's modules")
    function_index: int = Field(ge=0, le=2**31 - 1)
    kind: Literal["function", "block", "address"] = "function"
    offset: int = Field(0, ge=0, le=2**31 - 1, description="block and address: bytes from the function start")
    blocks: bool = Field(False, description="function: also every basic block of the function")


class MeasurementCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    target: str = Field("kernel", min_length=1, max_length=64, pattern=r"^(kernel|p[0-9]{1,10}-[0-9]{1,20})$")
    modules: list[Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] = Field(
        [], max_length=256, description="Catalog digests resources may name by position"
    )
    resources: list[ResourceRefIn] = Field(min_length=1)
    metrics: list[MetricName] = Field(min_length=1, max_length=8)
    where_pid: int | None = Field(None, ge=1, le=2**30)
    where_comm: str | None = Field(None, min_length=1, max_length=15, pattern=r"^[^\x00-\x1f\x7f]+$")
    where_cgroup: str | None = Field(None, min_length=1, max_length=1024, pattern=r"^[^\x00-\x1f\x7f]+$")
    interval_ms: int | None = Field(None, ge=100, le=60000)
    allow_partial: bool = Field(False, description="serve what the host can, the rest unavailable with reasons")
    command_id: uuid.UUID | None = Field(None, description="Idempotency key of the start command")
    measurement_id: uuid.UUID | None = Field(None, description="The measurement's id (default: a new one)")

    @model_validator(mode="after")
    def _modules_named(self) -> "MeasurementCreate":
        for r in self.resources:
            if (r.digest is None) == (r.module is None):
                raise ValueError("each resource names its module by digest or by module position, not both")
            if r.module is not None and r.module >= len(self.modules):
                raise ValueError("a resource names a module position the request's modules lack")
        return self

    def request(self, measurement_id: str) -> MeasurementRequest:
        """The request as it is stored and sent: resources by digest, each metric once."""
        return MeasurementRequest(
            measurement_id=measurement_id,
            target=self.target,
            metrics=list(dict.fromkeys(self.metrics)),
            resources=[
                ResourceRequest(
                    digest=r.digest or self.modules[r.module or 0],
                    **r.model_dump(include={"function_index", "kind", "offset", "blocks"}),
                )
                for r in self.resources
            ],
            **self.model_dump(include={"where_pid", "where_comm", "where_cgroup", "interval_ms", "allow_partial"}),
        )


MeasurementState = Literal["starting", "armed", "running", "target_exited", "stopped", "failed"]


class MeasurementPublic(BaseModel):
    id: str
    host_id: str
    target_id: str
    state: MeasurementState
    detail: str
    metrics: list[str]
    interval_ms: int
    resource_count: int
    created_by: str
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    last_ts: datetime | None
    start_command: str | None
    refused_intervals: int = Field(0, description="intervals the backend refused (acknowledged, not stored)")
    refusal: str = Field("", description="why the last refused interval was refused")


class MetricPlanPublic(BaseModel):
    metric: str = Field(description="count, wall_ns, vtime_ns, concurrency, cycles, ...")
    available: bool
    label: Literal["exact", "sampled", "estimate"]
    mechanism: str
    reason: str
    unit: str


class MeasuredResourcePublic(BaseModel):
    index: int
    digest: str
    function_index: int
    function_id: int | None = Field(description="The catalog function (null until its piece is stored)")
    kind: Literal["function", "block"]
    block_offset: int | None
    function: str
    address: int
    address_hex: str
    size: int
    function_row: int | None = Field(description="Block rows: the index of their function's row")
    metrics: list[MetricPlanPublic]


class MeasurementDetail(MeasurementPublic):
    request: MeasurementRequest
    resources: list[MeasuredResourcePublic]


class SlotValues(BaseModel):
    """Additive values (sums over the period; null where the metric has no value): count (calls,
    executions or samples), wall_ns, vtime_ns, hardware counters, exits (timed calls completed) and
    samples (sampled rows)."""

    count: float | None
    wall_ns: float | None
    vtime_ns: float | None
    cycles: float | None
    instructions: float | None
    icache_stall: float | None
    branch_mispredict: float | None
    exits: float | None
    samples: float | None


class ResourceValues(BaseModel):
    resource: int
    values: SlotValues


class LatestInterval(BaseModel):
    start: datetime
    seconds: float
    resources: list[ResourceValues]


class MeasurementValues(RangePublic):
    measured_seconds: float = Field(description="Interval time inside the range: the divisor of rates and concurrency")
    intervals: int
    resources: list[ResourceValues]
    latest: LatestInterval | None


class MeasuredBlock(BaseModel):
    offset: int = Field(description="Offset from the function start")
    row: int | None = Field(description="The block's row in the measurement; null: not measured")
    count: float | None = Field(
        description="Executions (exact) or samples (sampled) summed over the range; "
        "null: no data (the block is not a row, or no interval in the range)"
    )
    label: str | None = Field(description="exact, sampled or estimate: how the count was taken")


class MeasuredEdge(BaseModel):
    from_offset: int | None = Field(description="The from block's offset; null: the edge enters the function")
    to_offset: int | None = Field(description="The to block's offset; null: the edge leaves the function")
    kind: str = Field(description="entry, fallthrough, taken, tail_call, indirect, return, no_successor or indirect_in")
    label: str = Field(description="exact_derived, estimated or sampled_estimate (the weakest in the range)")
    count: int = Field(description="Summed over the range's intervals (samples for sampled_estimate)")


class MeasurementCfg(RangePublic):
    """A measured function's block counts and the edge counts the agent derived, over a range."""

    function_row: int
    function_id: int | None
    function: str
    basis: str = Field(description="exact, sampled or none: how the function's blocks were counted")
    intervals: int = Field(description="Intervals of the measurement in the range")
    edge_intervals: int = Field(description="Intervals in the range that carried edge counts")
    blocks: list[MeasuredBlock]
    edges: list[MeasuredEdge]


class SeriesPoint(BaseModel):
    t: datetime
    values: SlotValues


class ResourceSeries(BaseModel):
    resource: int
    points: list[SeriesPoint]


class SeriesBucket(BaseModel):
    t: datetime
    seconds: float


class MeasurementSeries(RangePublic):
    step_s: int
    buckets: list[SeriesBucket] = Field(description="Measured seconds per bucket")
    series: list[ResourceSeries]
