# SPDX-License-Identifier: Apache-2.0
"""Call stacks: flame graphs and their differences, a function's callers and callees, instruction samples."""

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from app.api.schemas.common import RangePublic


class StackFilterPublic(BaseModel):
    """The samples a stack view covers: one process, command or CPU (null: any), and the idle task's
    samples excluded (default), included, or alone."""

    pid: int | None
    comm: str | None
    cpu: int | None
    idle: Literal["exclude", "include", "only"]


class FramePublic(BaseModel):
    """A frame of a flame graph: kernel frames merged by function (function_id set once the catalog is
    stored), user frames by file and offset, others by address."""

    name: str
    module: str
    kind: Literal["kernel", "kernel_address", "user", "user_address"]
    function_id: int | None


class FlamePaths(BaseModel):
    """The range's distinct call paths after the filter (stacks that differ only below the merging by
    function are one path): `frame` holds every path's frames (indices into frames) root first, one path
    after the other; path k has `length[k]` frames and `samples[k]` samples. The console merges them into
    the tree (a path may be empty: samples of the root itself)."""

    frame: list[int]
    length: list[int]
    samples: list[int]


class ProcessSamples(BaseModel):
    pid: int = Field(description="0: the idle task; -1: tasks that were exiting when sampled")
    comm: str
    samples: int


class CommandSamples(BaseModel):
    comm: str
    samples: int


class CpuSamples(BaseModel):
    cpu: int
    samples: int


class StackContexts(BaseModel):
    """Whose stack samples the range holds, before any filter (for the filter menus)."""

    processes: list[ProcessSamples]
    commands: list[CommandSamples]
    cpus: list[CpuSamples]
    all_samples: int
    idle_samples: int = Field(description="The idle task's (pid 0) samples")


class FlameGraph(RangePublic):
    filter: StackFilterPublic
    samples: int = Field(description="Samples the filter selects (the root's total plus undefined_samples)")
    undefined_samples: int = Field(description="Samples of stacks whose frames the host never sent")
    frames: list[FramePublic]
    paths: FlamePaths
    contexts: StackContexts


StackId = Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]


class FlameStackCounts(BaseModel):
    """The range's stacks with a definition after the filter: stack k is `id[k]` (its content id, 16
    hexadecimal digits: a 64-bit number does not fit a JSON reader's doubles) with `samples[k]` samples."""

    id: list[str]
    samples: list[int]


class FlameStacks(RangePublic):
    """A flame graph by stack id: the counts of every view, the frames of each stack asked for once
    (/flamegraph/definitions) and kept by the console under the host and `catalog` (a stack id names its
    frames for good in one database and catalog)."""

    filter: StackFilterPublic
    samples: int = Field(description="Samples the filter selects (those of stacks plus undefined_samples)")
    undefined_samples: int = Field(description="Samples of stacks whose frames the host never sent")
    stacks: FlameStackCounts
    contexts: StackContexts
    catalog: str = Field(
        pattern=r"^[0-9a-f]{16}$",
        description="What the host's definitions depend on beyond their ids (the format, the host's "
        "enrolment, its catalog pieces as this database numbers them): definitions kept under another "
        "value must be asked for again",
    )
    definitions: "FlameDefinitions | None" = Field(
        None,
        description="With definitions=true: every stack's frames, as /flamegraph/definitions gives them (for "
        "a console that keeps none of the host's, one request instead of two)",
    )


class FlameDefinitionsRequest(BaseModel):
    ids: list[StackId] = Field(max_length=400_000, description="Stack ids as /flamegraph/stacks gives them")


class FlameStackPaths(BaseModel):
    """Stack k is `id[k]`; its frames (indices into frames, merged by function as in the flame graph) are
    the next `length[k]` entries of `frame`, root first."""

    id: list[str]
    length: list[int]
    frame: list[int]


class FlameDefinitions(BaseModel):
    """The frames of the stacks asked for that have a definition (others are left out). A kernel frame
    whose function_id is null is not named yet (its catalog piece was not stored): ask again later."""

    frames: list[FramePublic]
    stacks: FlameStackPaths


FlameStacks.model_rebuild()  # its definitions are a FlameDefinitions, defined after it


class FlameDiffNodes(BaseModel):
    """The tree of both ranges in pre-order, one entry per node in each array: its frame (index into
    frames), its parent (index into these arrays; -1 for the root, which stands for all samples and has
    frame -1), and its samples (total: with everything it called) and self samples in range A and in range
    B. Children follow their parent, heaviest first."""

    frame: list[int]
    parent: list[int]
    a_total: list[int]
    b_total: list[int]
    a_self: list[int]
    b_self: list[int]


class FlameDiff(BaseModel):
    a: RangePublic
    b: RangePublic
    a_host_id: str
    b_host_id: str
    filter: StackFilterPublic
    a_samples: int
    b_samples: int
    folded_samples: int
    frames: list[FramePublic]
    nodes: FlameDiffNodes


class CallPeer(BaseModel):
    """A caller or callee seen in the range's stacks, with the samples of stacks where it was one."""

    name: str
    module: str
    kind: Literal["kernel", "kernel_address", "user", "user_address"]
    function_id: int | None
    samples: int


class CallSiteTargets(BaseModel):
    """The callees observed at one call site of the function (for an indirect site: its observed targets)."""

    site_offset: int
    indirect: bool
    callees: list[CallPeer]


class FunctionCalls(RangePublic):
    function_id: int
    filter: StackFilterPublic
    samples: int = Field(description="Samples with a stack the filter selects")
    inclusive_samples: int
    self_samples: int
    callers: list[CallPeer]
    callees: list[CallPeer]
    call_sites: list[CallSiteTargets]


class InstructionSamplesItem(BaseModel):
    offset: int = Field(description="The instruction's offset from the function start")
    samples: int
    samples_per_sec: float


class InstructionSamples(RangePublic):
    function_id: int
    total: int = Field(description="The function's samples in the range")
    counted: int = Field(description="Of those, the samples whose instruction is known")
    items: list[InstructionSamplesItem]
