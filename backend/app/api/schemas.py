# SPDX-License-Identifier: Apache-2.0
"""Request and response shapes of the REST and WebSocket API.

Their names are part of the contract: the console's TypeScript client is generated from the OpenAPI
document and uses them. Every 64-bit address is an integer (the contract) with a `*_hex` twin — lower
case hex without "0x" — because JavaScript loses the low bits of integers above 2^53.
"""
import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Role = Literal["viewer", "operator", "approver", "admin"]
SuccessorKindName = Literal["fallthrough", "taken", "tail_call", "indirect", "return"]


class Message(BaseModel):
    detail: str


class LoginRequest(BaseModel):
    username: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=256)


class UserPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: uuid.UUID
    username: str
    role: Role


class UserDetail(UserPublic):
    created_at: datetime
    disabled_at: datetime | None = Field(description="when an admin disabled the user (cannot sign in or use "
                                                     "a token issued before); null while enabled")


class UserUpdate(BaseModel):
    role: Role | None = Field(None, description="the new role")
    disabled: bool | None = Field(None, description="disable (true) or enable (false) the user")


class PasswordReset(BaseModel):
    password: str = Field(min_length=8, max_length=256)


class UserCreate(BaseModel):
    username: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    password: str = Field(min_length=8, max_length=256)
    role: Role = "viewer"


class Token(BaseModel):
    access_token: str
    token_type: Literal["bearer"] = "bearer"
    user: UserPublic


class LoginFailure(BaseModel):
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
    clock_offset_ms: int | None = Field(description="the host's clock minus the backend's, measured at connect "
                                                    "or from a refused batch")
    clock_skewed: bool = Field(description="the clock offset exceeds the bound batches are accepted within")
    refused_batches: int = Field(description="metric batches refused because their time was out of bounds")


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


TargetKind = Literal["kernel", "process"]
TargetState = Literal["attached", "exited", "detached", "gone"]


class TargetPublic(BaseModel):
    id: str = Field(description='"kernel", or "p<pid>-<start time>" for a process')
    kind: TargetKind
    pid: int | None
    command: str
    executable: str
    state: TargetState
    detail: str
    attached_at: datetime | None
    ended_at: datetime | None
    module_count: int
    active_measurements: int


class AttachRequest(BaseModel):
    """Attach a running process by pid, or every process with a command name."""
    model_config = ConfigDict(extra="forbid")
    pid: int | None = Field(None, ge=1, le=2**30)
    command: str | None = Field(None, min_length=1, max_length=15, pattern=r"^[^\x00-\x1f\x7f]+$")
    command_id: uuid.UUID | None = Field(None, description="Idempotency key: the same id returns the same command")

    @model_validator(mode="after")
    def _one_of(self) -> "AttachRequest":
        if (self.pid is None) == (self.command is None):
            raise ValueError("give either pid or command")
        return self


CommandState = Literal["queued", "sent", "running", "done", "failed", "cancelled"]
CommandKind = Literal["inspect_function", "attach_target", "detach_target", "start_measurement",
                      "stop_measurement", "cancel", "make_plan", "install_plan", "revert_plan",
                      "list_installed"]


class CommandPublic(BaseModel):
    id: str
    host_id: str
    kind: CommandKind
    params: dict
    state: CommandState
    progress: float | None = Field(description="Completed fraction the agent reported, 0..1")
    message: str = Field(description="What the agent is doing, as it last reported")
    result: dict | None
    error: str | None
    created_by: str
    created_at: datetime
    sent_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested: bool


class CommandRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command_id: uuid.UUID | None = Field(None, description="Idempotency key: the same id returns the same command")


MetricName = Literal["count", "wall", "vtime", "concurrency", "cycles", "instructions", "icache_stall",
                     "branch_mispredict"]


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
        [], max_length=256, description="Catalog digests resources may name by position")
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
    request: dict
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
    measured_seconds: float = Field(description="Interval time inside the range: the divisor of rates and "
                                                "concurrency")
    intervals: int
    resources: list[ResourceValues]
    latest: LatestInterval | None


class MeasuredBlock(BaseModel):
    offset: int = Field(description="Offset from the function start")
    row: int | None = Field(description="The block's row in the measurement; null: not measured")
    count: float | None = Field(description="Executions (exact) or samples (sampled) summed over the range; "
                                            "null: no data (the block is not a row, or no interval in the range)")
    label: str | None = Field(description="exact, sampled or estimate: how the count was taken")


class MeasuredEdge(BaseModel):
    from_offset: int | None = Field(description="The from block's offset; null: the edge enters the function")
    to_offset: int | None = Field(description="The to block's offset; null: the edge leaves the function")
    kind: str = Field(description="entry, fallthrough, taken, tail_call, indirect, return, no_successor or "
                                  "indirect_in")
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


class FunctionSummary(BaseModel):
    id: int
    name: str
    module: str
    digest: str = Field(description="The function's catalog piece (its identity in measurement requests)")
    index: int = Field(description="The function's index within its catalog piece")
    address: int
    address_hex: str
    size: int
    block_count: int
    samples_per_sec: float
    undecodable: bool


class FunctionsPage(BaseModel):
    total: int
    items: list[FunctionSummary]


class SuccessorPublic(BaseModel):
    kind: SuccessorKindName
    target_offset: int | None
    target_address: int | None
    target_address_hex: str | None
    target_name: str | None
    target_function_id: int | None


class BlockPublic(BaseModel):
    offset: int
    address: int
    address_hex: str
    size: int
    instruction_count: int
    successors: list[SuccessorPublic]


class CalleePublic(BaseModel):
    site_offset: int
    # null: a named callee in another module that is not found by name on this host (the catalog keeps no
    # address for it: the sending host's module placement is not this host's, and no digest covers it)
    target_address: int | None
    target_address_hex: str | None
    name: str | None
    module: str | None
    function_id: int | None


class FunctionDetail(BaseModel):
    function: FunctionSummary
    undecodable_offset: int | None
    blocks: list[BlockPublic]
    callees: list[CalleePublic]
    indirect_call_sites: list[int]


class InstructionPublic(BaseModel):
    offset: int
    address: int
    address_hex: str
    length: int
    bytes: str
    text: str
    probe: bool = Field(description="A running measurement's probe sits on this instruction (the bytes shown "
                                    "are the program's own, not the probe's int3)")


class InstructionsPublic(BaseModel):
    function_id: int
    address: int
    address_hex: str
    cached: bool
    instructions: list[InstructionPublic]
    probes: list[int] = Field(description="Offsets where the host's armed or running measurements of this "
                                          "target have a probe in the function now")


class BlockSamplesPublic(BaseModel):
    offset: int
    samples: int
    samples_per_sec: float


class FunctionSamples(RangePublic):
    function_id: int
    window_s: int
    total: int
    blocks: list[BlockSamplesPublic]


class SampleTotals(BaseModel):
    """Whole-host totals of a range. kernel = total − user; idle is the part of kernel spent in the idle
    loop; unmapped is kernel samples outside any known function; lost is what the sampler dropped."""
    total_samples: int
    user_samples: int
    kernel_samples: int
    idle_samples: int
    unmapped_samples: int
    lost_samples: int
    stack_samples: int = Field(0, description="Samples whose call stack is stored (the base of inclusive counts "
                                              "and flame graphs)")


class TopFunctionItem(BaseModel):
    function_id: int
    name: str
    module: str
    address: int | None
    address_hex: str | None
    samples: int
    samples_per_sec: float
    share: float = Field(description="Share of all samples of the host in the range (kernel and user)")
    idle: bool = Field(description="Most of its samples were the idle task's (those are left out of rankings "
                                   "unless include_idle)")
    inclusive_samples: int | None = Field(None, description="Samples whose call stack contains the function "
                                                            "(itself or anything it called); null when the range has "
                                                            "no stacks")


class TopFunctions(RangePublic, SampleTotals):
    window_s: int
    functions: int = Field(description="How many functions had samples (the rows there are to page through)")
    items: list[TopFunctionItem]


class HotnessItem(BaseModel):
    function_id: int
    samples_per_sec: float


class Hotness(RangePublic):
    window_s: int
    items: list[HotnessItem]


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


class EnrolmentTokenCreate(BaseModel):
    note: str = Field("", max_length=200, description="what the token is for, for the list")
    hours: float = Field(24.0, gt=0, le=24 * 30, description="how long the token stays valid")
    host_id: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$",
                                description="only this host may use the token; needed to enrol a host that "
                                            "holds a certificate already (a new key, a reinstalled agent)")


class EnrolmentTokenPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: uuid.UUID
    note: str
    host_id: str | None
    created_by: str
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None
    used_by_host: str | None
    revoked_at: datetime | None


class EnrolmentTokenCreated(EnrolmentTokenPublic):
    token: str = Field(description="the one-time token; shown only in this answer")
    ca_pem: str = Field(description="the CA certificate agents verify the backend with")
    enroll_port: int = Field(description="the port agents enrol on (TLS)")


class EnrolmentRequestPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: uuid.UUID
    host_id: str
    key_fingerprint: str = Field(description="SHA-256 (hex) of the requesting key's DER SubjectPublicKeyInfo; "
                                             "on the host: openssl pkey -in key.pem -pubout -outform DER | sha256sum")
    hostname: str
    peer: str
    requested_at: datetime
    status: Literal["pending", "approved", "rejected"]
    decided_by: str | None
    decided_at: datetime | None
    conflicting: int = Field(description="how many other keys ask for the same host id and are pending")
    host_enrolled: bool = Field(description="the host id holds a certificate already (it cannot be approved; "
                                            "only a token created for this host id can enrol it again)")


class EnrolmentRejectMany(BaseModel):
    request_ids: list[uuid.UUID] | None = Field(None, max_length=5000,
                                                description="the pending requests to reject")
    all_pending: bool = Field(False, description="reject every pending request instead")

    @model_validator(mode="after")
    def _one_of(self) -> "EnrolmentRejectMany":
        if (self.request_ids is None) == (not self.all_pending):
            raise ValueError("give either request_ids or all_pending: true")
        return self


class EnrolmentRejected(BaseModel):
    rejected: int = Field(description="how many pending requests were rejected")


class TimelinePoint(BaseModel):
    t: datetime = Field(description="Start of the bucket")
    seconds: float = Field(description="Sampled seconds in the bucket (intervals the host reported)")
    total: int
    user: int
    kernel: int
    idle: int
    unmapped: int


class Timeline(RangePublic):
    step_s: int
    points: list[TimelinePoint]


class CompareSide(RangePublic, SampleTotals):
    host_id: str


class CompareItem(BaseModel):
    name: str
    module: str
    idle: bool
    a_function_id: int | None
    b_function_id: int | None
    a_samples: int
    b_samples: int
    a_per_sec: float
    b_per_sec: float
    delta_per_sec: float = Field(description="b_per_sec − a_per_sec")
    a_share: float
    b_share: float


class Comparison(BaseModel):
    a: CompareSide
    b: CompareSide
    functions: int
    items: list[CompareItem]


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


class FlameNodes(BaseModel):
    """The tree in pre-order, one entry per node in each array: its frame (index into frames), its parent
    (index into these arrays; -1 for the root, which stands for all samples and has frame -1), its
    samples (total: with everything it called) and self samples. Children follow their parent, heaviest
    first."""
    frame: list[int]
    parent: list[int]
    total: list[int]
    self: list[int]


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
    folded_samples: int = Field(description="Samples of nodes folded into their parent to bound the tree's size")
    frames: list[FramePublic]
    nodes: FlameNodes
    contexts: StackContexts


class FlameDiffNodes(BaseModel):
    """Like FlameNodes, with totals and self samples for range A and range B."""
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


class CatalogPublic(BaseModel):
    """One content-addressed catalog piece (a module of one build) in columns, in address order.
    Offsets are relative to the module's base; add a host's base_address (GET /hosts/{id}/modules) for
    addresses. It never changes, so it is served with immutable caching."""
    digest: str
    module: str
    function_count: int
    ids: list[int]
    names: list[str]
    offsets: list[int]
    sizes: list[int]
    block_counts: list[int]
    undecodable: list[int] = Field(
        description="Positions (in these columns) of functions the agent could not decode whole")


class AuditEntry(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    at: datetime
    actor: str
    action: str
    target: str | None
    detail: dict


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


LiveEvent = Annotated[HostEvent | SamplesEvent | PingEvent | GapEvent | CommandEvent | TargetsEvent |
                      MeasurementEvent | PlanEvent, Field(discriminator="type")]


PlanState = Literal["planning", "ready", "failed", "cancelled", "requested", "approved", "rejected", "installing",
                    "installed", "install_failed", "reverting", "reverted", "stale"]


class PlanCreate(BaseModel):
    """Ask the host's agent to plan the re-layout of a root function (and its hot callees)."""
    model_config = ConfigDict(extra="forbid")
    target: str = Field("kernel", min_length=1, max_length=64, pattern=r"^(kernel|p[0-9]{1,10}-[0-9]{1,20})$")
    digest: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="The root's module (catalog digest)")
    function_index: int | None = Field(None, ge=0, le=2**31 - 1)
    function_id: int | None = Field(None, ge=1, le=2**62, description="Or the root as the console names it")
    seconds: int = Field(0, ge=0, le=600, description="How long to count blocks (0: the agent's default, 10)")
    join_fraction: float = Field(0, ge=0, le=1, description="0: the agent's default (0.05)")
    stall_threshold: float = Field(0, ge=0, le=1, description="0: the agent's default (0.10)")
    max_functions: int = Field(0, ge=0, le=4096, description="0: the agent's default (64)")
    measurement_id: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[0-9A-Za-z_-]+$",
                                       description="Use this measurement's block counts instead of measuring anew")
    plan_id: uuid.UUID | None = Field(None, description="Idempotency key: the same id returns the same plan")

    @model_validator(mode="after")
    def _root_named(self) -> "PlanCreate":
        if (self.function_id is None) == (self.digest is None or self.function_index is None):
            raise ValueError("name the root by digest and function_index, or by function_id")
        return self


class PlanReject(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=2000, pattern=r"^[^\x00-\x08\x0b-\x1f\x7f]*$")


class PlanInstall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    window_s: int = Field(5, ge=1, le=600, description="Seconds the root is measured before and after the install")


class PlanPublic(BaseModel):
    id: str
    host_id: str
    target_id: str
    root_digest: str
    root_function_index: int
    root_name: str
    options: dict
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
    members: list[str] = Field(description="The group's functions by name, root first (the plan's group; empty "
                                           "until the plan is made)")


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
    spread: dict[str, PlanSpread] = Field(default_factory=dict,
                                          description="Per figure, its range over the window's intervals")


class PlanComparison(BaseModel):
    before: PlanWindow | None
    after: PlanWindow | None
    change: dict[str, float | None] = Field(description="(after - before) / before per figure")


class PlanDetail(PlanPublic):
    plan: dict | None = Field(description="The agent's plan (hotpathd plan --json) as the backend checked it")
    install_detail: dict | None
    revert_detail: dict | None
    install_command: str | None
    revert_command: str | None
    comparison: PlanComparison | None


class PlanAuditEntry(BaseModel):
    id: int
    at: datetime
    actor: str
    action: str
    target: str | None
    detail: dict
