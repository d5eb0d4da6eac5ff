# SPDX-License-Identifier: Apache-2.0
"""The fleet: hosts grouped by kernel build, a group's hot code across its hosts, and its flame graphs."""

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas.common import RangePublic
from app.api.schemas.stacks import FlameDiffNodes, FramePublic, StackFilterPublic


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


class FleetFlameHost(FleetHost):
    samples: int = Field(description="The host's samples with a stack in the covered range, after the filter")


class FleetFlameNodes(BaseModel):
    """The tree in pre-order, one entry per node in each array: its frame (index into frames; -1 for the
    root, which stands for all samples), its parent (index into these arrays; -1 for the root), its samples
    with everything it called (total) and its own (self), summed over the hosts. Children follow their
    parent, heaviest first."""

    frame: list[int]
    parent: list[int]
    total: list[int]
    self: list[int]


class FleetFlameGraph(RangePublic):
    """A group's call stacks in a range ([from, to) as asked) as one tree, frames merged by function across
    its hosts (one kernel build: a function is the same on each)."""

    covered_from: datetime | None = Field(
        description="Start of the part of the range read: its whole minutes below the rollup watermark"
    )
    covered_to: datetime | None = Field(description="End of that part; null when the rollups cover none of it")
    group: FleetGroupSummary
    labels: dict[str, str] = Field(description="The label filter applied (every label must match)")
    filter: StackFilterPublic
    hosts: list[FleetFlameHost] = Field(description="The group's hosts matching the label filter, by name")
    samples: int = Field(description="Samples with a stack in the covered range over the hosts, after the filter")
    undefined_samples: int = Field(description="Of those, samples of stacks whose frames no host defined")
    folded_samples: int = Field(description="Samples of nodes folded into their parent to bound the tree")
    frames: list[FramePublic]
    nodes: FleetFlameNodes


class FleetCompareSide(RangePublic):
    """One side of a comparison: the group's hosts matching its labels (and none of its `without` labels)
    over its range ([from, to) as asked; the covered part read)."""

    covered_from: datetime | None
    covered_to: datetime | None
    labels: dict[str, str]
    without: dict[str, str] = Field(description="Hosts carrying any of these labels are left out")
    hosts: list[FleetFlameHost]


class FleetFlameDiff(BaseModel):
    """Two sides of a group (hosts by label, and ranges) merged into one tree with both sides' samples, in
    the shape of a host's differential flame graph."""

    group: FleetGroupSummary
    a: FleetCompareSide
    b: FleetCompareSide
    filter: StackFilterPublic
    a_samples: int
    b_samples: int
    folded_samples: int
    frames: list[FramePublic]
    nodes: FlameDiffNodes
