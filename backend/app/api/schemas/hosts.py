# SPDX-License-Identifier: Apache-2.0
"""Hosts, their modules and the coverage of their data."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from app.protocol.labels import check_labels


class CacheGeometry(BaseModel):
    size_bytes: int
    line_bytes: int
    ways: int


class Capability(BaseModel):
    name: str
    available: bool
    detail: str


class HostPublic(BaseModel):
    id: str
    hostname: str
    kernel_release: str
    kernel_build_id: str
    cpu_model: str
    cpu_count: int
    l1i: CacheGeometry | None
    capabilities: list[Capability]
    agent_version: str
    online: bool
    last_seen: datetime | None
    connected_at: datetime | None
    catalog_complete: bool
    function_count: int
    block_count: int
    sample_frequency_hz: int
    sample_event: str
    status: Literal["active", "retired"] = Field(description="retired hosts cannot connect until deleted")
    enrolled: bool = Field(description="the host holds a current certificate")
    cert_not_after: datetime | None
    replica: str | None = Field(description="the backend replica that holds (or last held) the host's stream")
    clock_offset_ms: int | None = Field(
        description="the host's clock minus the backend's, measured at connect or from a refused batch"
    )
    clock_skewed: bool = Field(description="the clock offset exceeds the bound batches are accepted within")
    refused_batches: int = Field(description="metric batches refused because their time was out of bounds")
    labels: dict[str, str] = Field(
        default_factory=dict, description="The labels the fleet views group and filter by (role, region, rack, ...)"
    )
    agent_labels: dict[str, str] = Field(
        default_factory=dict, description="The labels the host's agent reported in its last Hello (its config file)"
    )
    labels_edited_by: str | None = Field(
        None, description="The admin who last edited the labels; null while they are the agent's"
    )
    labels_edited_at: datetime | None = None


class LabelsUpdate(BaseModel):
    """New labels for a host, replacing its labels (the agent's reports no longer change them), or null to
    follow the agent's again."""

    labels: dict[str, str] | None = Field(
        description="At most 32 labels; keys of 1-63 letters, digits, '.', '_', '-' or '/'; values of at most "
        "255 characters without control characters"
    )

    @field_validator("labels")
    @classmethod
    def _rules(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return None if v is None else check_labels(v.items(), "labels")


class ModulePublic(BaseModel):
    name: str
    digest: str = Field(description="The module's catalog piece: the same binary shares one everywhere")
    base_address: int
    base_address_hex: str
    function_count: int
    block_count: int
    complete: bool
    build_id: str = Field("", description="GNU build id of the module's ELF file (vmlinux: the kernel's)")
    target_id: str = Field("kernel", description="The target (kernel or process) that loaded it")


class CoverageBucket(BaseModel):
    start: datetime
    covered_ms: int = Field(description="milliseconds of the bucket covered by stored metric intervals")


class GapPublic(BaseModel):
    id: int
    start: datetime
    end: datetime
    messages: int
    reason: str
    source: Literal["agent", "backend"]


class DataCoverage(BaseModel):
    start: datetime
    end: datetime
    bucket_s: int
    buckets: list[CoverageBucket]
    gaps: list[GapPublic]
