# SPDX-License-Identifier: Apache-2.0
"""The fleet: hosts grouped by kernel build, a group's hot code across its hosts, and its flame graphs."""

from datetime import datetime
from typing import Literal

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
    outlier: bool = Field(description="The host is an outlier for the function (outlier_rule)")


class HotFunction(BaseModel):
    function_id: int = Field(description="The function's id, the same on every host of the build")
    name: str
    module: str
    samples: int = Field(description="Samples across the group's hosts")
    hot_hosts: int = Field(description="Hosts where the function is hot (share ≥ min_share)")
    host_share: float = Field(description="hot_hosts over the group's hosts (those matching the label filter)")
    outlier_hosts: list[str] = Field(
        description="The hosts where the function is an outlier (outlier_rule), as in cells' order"
    )
    median_share: float | None = Field(
        description="The function's median share over the group's hosts with busy samples (0 where it has "
        "none); set when it has outlier hosts"
    )
    cells: list[HotCodeCell] = Field(description="One per host with samples of the function, most first")


class OutlierRule(BaseModel):
    """When a host is an outlier for a function: its share of the host's busy samples far above the group's
    typical host's (docs/decisions.md, "Outlier hosts in the fleet's hot code")."""

    min_hosts: int = Field(description="The group needs at least this many hosts with busy samples")
    min_samples: int = Field(description="The host has at least this many samples of the function")
    min_ratio: float = Field(description="Its share is at least this many times the median share")
    min_z: float = Field(
        description="Its modified z-score, 0.6745 (share - median) / MAD of the shares, is at least this "
        "(any, when the MAD is 0)"
    )
    min_share: float = Field(description="Its share is at least this (the request's min_share: hot there)")
    list_cap: int = Field(description="The most outliers the group's list carries")
    text: str = Field(description="The rule in words")


class HotCodeOutlier(BaseModel):
    function_id: int
    name: str
    module: str
    host_id: str
    hostname: str
    samples: int = Field(description="The function's samples on the host")
    share: float = Field(description="Of the host's busy samples")
    median_share: float = Field(description="The function's median share over the group's hosts with busy samples")
    ratio: float | None = Field(description="share / median_share; null when the median is 0")
    z: float | None = Field(description="The modified z-score; null when the MAD is 0 (any excess is far out)")


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
    outlier_rule: OutlierRule
    outliers: list[HotCodeOutlier] = Field(
        description="Outlier (function, host) pairs over every ranked function, not only this page: farthest "
        "out first (share above the median share, descending), at most outlier_rule.list_cap"
    )
    outliers_total: int = Field(description="Outlier pairs over every ranked function, before the cap")


class FleetPlanWindow(BaseModel):
    measurement_id: str
    state: str = Field(description="The window's measurement state")
    seconds: float = Field(description="Measured seconds of the window")
    calls: float | None = Field(description="The root's calls in the window")
    calls_per_s: float | None
    wall_ns_per_call: float | None
    unavailable: dict[str, str] = Field(description="Metrics the host could not measure, with the reason")


class FleetPlanComparison(BaseModel):
    before: FleetPlanWindow | None = Field(description="The window before the install (null: not stored)")
    after: FleetPlanWindow | None = Field(description="The window after the install (null: not stored)")
    change: dict[str, float | None] = Field(
        description="(after - before) / before of calls_per_s and wall_ns_per_call; null when either is missing"
    )
    emulated: str | None = Field(
        description="Set when the host's CPU is emulated in software: its times are not performance figures"
    )


class FleetPlan(BaseModel):
    plan_id: str
    host_id: str
    hostname: str
    online: bool
    group_id: str = Field(description="The host's kernel-build group (FleetGroup.id)")
    kernel_release: str
    kernel_build_id: str = Field(description="The host's kernel build id")
    target_id: str = Field(description="kernel, or the process target's id")
    target_kind: Literal["kernel", "process"]
    target_module: str | None
    root_name: str
    root_digest: str
    root_function_index: int
    state: Literal["installed", "reverted"]
    estimated: bool = Field(description="Block counts were sampled: the plan's counts are estimates")
    code_sha256: str | None
    installed_at: datetime | None = Field(description="Since when the plan runs on the host")
    installed_by: str | None = Field(description="Who asked for the install")
    approved_by: str | None = Field(description="Who approved the plan (a roll-out's plans inherit it)")
    approved_at: datetime | None
    reverted_at: datetime | None
    reverted_by: str | None
    rollout_id: str | None = Field(description="The roll-out that installed it, if any")
    rollout_state: str | None
    derived_from: str | None = Field(description="The approved plan a roll-out made this one from")
    comparison: FleetPlanComparison | None = Field(
        description="The root's uprobe-timed windows before and after the install (as the plan's page has them, "
        "without the spread); null with comparison_missing saying why"
    )
    comparison_missing: str | None = Field(description="Why there is no comparison (null when there is one)")


class FleetPlans(BaseModel):
    total: int = Field(description="Plans matching the filter, over all pages")
    limit: int
    offset: int
    labels: dict[str, str]
    group_id: str | None
    kernel_build_id: str | None
    reverted_within_h: int = Field(description="Plans reverted in the last this many hours are listed too (0: none)")
    items: list[FleetPlan]


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


ROLLUP_DOC = (
    "What the samples were summed from: `group`, the kernel-build group's stack rollup (one row per stack and "
    "ten minutes, whatever the number of hosts); `group_less_hosts`, that less the rollups of the group's hosts "
    "a label leaves out (when they are fewer than those it keeps); `hosts`, each host's own stack rollups: a "
    "label keeping fewer hosts than it leaves out, or when the group's rollup cannot answer exactly (a `comm` "
    "filter, a host that left, changed build or was deleted within the range)"
)


class FleetFlameGraph(RangePublic):
    """A group's call stacks in a range ([from, to) as asked) as one tree, frames merged by function across
    its hosts (one kernel build: a function is the same on each)."""

    covered_from: datetime | None = Field(
        description="Start of the part of the range read: its whole minutes below the rollup watermark"
    )
    covered_to: datetime | None = Field(description="End of that part; null when the rollups cover none of it")
    rollup: Literal["group", "group_less_hosts", "hosts"] = Field(description=ROLLUP_DOC)
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
    rollup: Literal["group", "group_less_hosts", "hosts"] = Field(description=ROLLUP_DOC)
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
