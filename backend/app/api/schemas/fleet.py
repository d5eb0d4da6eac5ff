# SPDX-License-Identifier: Apache-2.0
"""The fleet: hosts grouped by kernel build, and a group's hot code across its hosts."""

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas.common import RangePublic


class FleetHost(BaseModel):
    id: str
    hostname: str
    online: bool
    last_seen: datetime | None = None
    labels: dict[str, str]


class FleetGroup(BaseModel):
    id: str = Field(description="The group's id: a digest of its kernel release and build id")
    kernel_release: str
    kernel_build_id: str = Field(description="GNU build id of the kernel (empty when the kernel has none)")
    host_count: int
    online_count: int
    offline_count: int
    hosts: list[FleetHost] = Field(description="The group's hosts (those matching the label filter), by name")


class FleetGroups(BaseModel):
    total: int = Field(description="Groups matching the filter, over all pages")
    limit: int
    offset: int
    labels: dict[str, str] = Field(description="The label filter applied (every label must match)")
    items: list[FleetGroup]


class FleetGroupSummary(BaseModel):
    id: str
    kernel_release: str
    kernel_build_id: str


class HotCodeHost(FleetHost):
    busy_samples: int = Field(description="The host's samples in the covered range, the idle task's left out")


class HotCodeCell(BaseModel):
    host_id: str
    samples: int = Field(description="The function's samples on this host (the idle task's left out)")
    share: float = Field(description="Of the host's busy samples in the covered range")
    hot: bool = Field(description="share is at least min_share")


class HotFunction(BaseModel):
    function_id: int = Field(description="The function's id, the same on every host of the build")
    name: str
    module: str
    samples: int = Field(description="Samples across the group's hosts")
    hot_hosts: int = Field(description="Hosts where the function is hot (share ≥ min_share)")
    host_share: float = Field(description="hot_hosts over the group's hosts (those matching the label filter)")
    cells: list[HotCodeCell] = Field(description="One per host with samples of the function, most first")


class RollupSpan(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    grain: str = Field(
        description="1h, 10m or 1m: the grain whose whole buckets make up the stretch (an hour's minutes may be "
        "read as a difference of ten-minute rows and of the hour's running totals, which sum the same minutes)"
    )
    from_: datetime = Field(alias="from")
    to: datetime


class FleetHotCode(RangePublic):
    """A group's hottest functions in a range ([from, to) is the range asked for)."""

    covered_from: datetime | None = Field(
        description="Start of the part of the range the rollups cover (whole minutes below the rollup watermark)"
    )
    covered_to: datetime | None = Field(description="End of that part; null when the rollups cover none of it")
    rollups: list[RollupSpan] = Field(description="The stretches of the covered part and the rollup grain of each")
    group: FleetGroupSummary
    labels: dict[str, str]
    min_share: float = Field(description="A function is hot on a host from this share of its busy samples")
    hosts: list[HotCodeHost]
    functions: int = Field(description="Functions with samples in the covered range, over all pages")
    limit: int
    offset: int
    items: list[HotFunction]
