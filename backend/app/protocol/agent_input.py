# SPDX-License-Identifier: Apache-2.0
"""What an agent may send, checked before anything is stored.

The backend trusts nothing an agent sends: every string is sane text of bounded length (no NUL or
control characters), every number fits the column it goes to, and a function's blocks obey the code
model's invariants (they tile the function exactly; fallthrough and taken successors name block
starts). A message that breaks a rule raises InvalidInput with a reason the stream ends with
(INVALID_ARGUMENT); the reason names the field and never echoes more than a short excerpt.
"""

import itertools
import re
from collections.abc import Sequence

from app.protocol.labels import InvalidLabels, check_labels
from app.protocol.proto import pb
from app.protocol.stack_defs import BatchStacks, FrameModule, stack_id

MAX_HOST_ID = 128
MAX_HOSTNAME = 255
MAX_SHORT_TEXT = 256
MAX_DETAIL = 1024
MAX_SYMBOL = 1024
MAX_MODULES = 4096
MAX_CAPABILITIES = 64
MAX_PIECE_FUNCTIONS = 2_000_000
MAX_PIECE_BLOCKS = 50_000_000
MAX_FUNCTION_BLOCKS = 1_000_000
MAX_BATCH_BLOCKS = 1_000_000
MAX_COUNT = 1 << 48  # samples in one interval; far above any real rate, far below BIGINT
INT32_MAX = (1 << 31) - 1
MAX_INTERVAL_MS = 3_600_000
MAX_STACKS = 100_000  # definitions in one batch
MAX_STACK_FRAMES = 512  # frames of one stack (the agent keeps at most 127)
MAX_BATCH_FRAMES = 2_000_000
MAX_STACK_COUNTS = 200_000
MAX_FRAME_MODULES = 8192
MAX_PATH = 4096
MAX_COMM = 64
MAX_PID = (1 << 32) - 1  # 2^32 - 1 is the kernel's -1: a task that was exiting
MAX_CPU = 65535
FRAME_KINDS = (1, 2, 3, 4)  # kernel function, kernel address, user file, user address
DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
INSTANCE_RE = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
MAX_INSTALLS = 1024
INSTALL_STATES = ("installed", "installing", "reverting", "heap_kept", "process_gone")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
KIND_FALLTHROUGH, KIND_TAKEN, KIND_TAIL_CALL, KIND_INDIRECT, KIND_RETURN = 1, 2, 3, 4, 5


class InvalidInput(ValueError):
    """A message from an agent that breaks the contract; str() is the reason sent back."""


def excerpt(value: str, limit: int = 40) -> str:
    return repr(value[:limit] + ("…" if len(value) > limit else ""))


def text(value: str, what: str, max_len: int, *, empty: bool = False) -> str:
    if not value and not empty:
        raise InvalidInput(f"{what} is empty")
    if len(value) > max_len:
        raise InvalidInput(f"{what} is {len(value)} characters long (at most {max_len})")
    if _CONTROL.search(value):
        raise InvalidInput(f"{what} contains a NUL or control character: {excerpt(value)}")
    return value


def check_hello(hello: "pb.Hello") -> None:
    text(hello.host_id, "Hello.host_id", MAX_HOST_ID)
    text(hello.hostname, "Hello.hostname", MAX_HOSTNAME)
    for field in ("kernel_release", "kernel_build_id", "cpu_model", "agent_version", "sample_event"):
        text(getattr(hello, field), f"Hello.{field}", MAX_SHORT_TEXT, empty=True)
    if hello.instance_id and not INSTANCE_RE.match(hello.instance_id):
        raise InvalidInput("Hello.instance_id must be 1 to 64 letters, digits, '-' or '_'")
    if hello.cpu_count > 65536:
        raise InvalidInput(f"Hello.cpu_count {hello.cpu_count} is out of range")
    for field in ("size_bytes", "line_bytes", "ways"):
        if getattr(hello.l1i, field) > INT32_MAX:
            raise InvalidInput(f"Hello.l1i.{field} is out of range")
    if not 0 <= hello.metric_interval_ms <= MAX_INTERVAL_MS:
        raise InvalidInput("Hello.metric_interval_ms is out of range")
    if hello.sample_frequency_hz > 1_000_000:
        raise InvalidInput("Hello.sample_frequency_hz is out of range")
    if not 0 <= hello.parse_seconds < 1e6:
        raise InvalidInput("Hello.parse_seconds is out of range")
    if len(hello.capabilities) > MAX_CAPABILITIES:
        raise InvalidInput(f"Hello lists {len(hello.capabilities)} capabilities (at most {MAX_CAPABILITIES})")
    for c in hello.capabilities:
        text(c.name, "Capability.name", 64)
        text(c.detail, f"Capability {c.name} detail", MAX_DETAIL, empty=True)
    if len(hello.modules) > MAX_MODULES:
        raise InvalidInput(f"Hello lists {len(hello.modules)} modules (at most {MAX_MODULES})")
    names: set[str] = set()
    for m in hello.modules:
        text(m.name, "ModuleRef.name", MAX_SYMBOL)
        if m.name in names:
            raise InvalidInput(f"module {excerpt(m.name)} is listed twice")
        names.add(m.name)
        check_module_ref(m, "Hello")
    check_targets(hello.targets)
    if len(hello.measurements) > MAX_MEASUREMENTS:
        raise InvalidInput(f"Hello lists {len(hello.measurements)} measurements (at most {MAX_MEASUREMENTS})")
    for info in hello.measurements:
        check_measurement_info(info)
    check_installs(hello.installs)
    try:
        check_labels(((lb.key, lb.value) for lb in hello.labels), "Hello.labels")
    except InvalidLabels as exc:
        raise InvalidInput(str(exc)) from None


def check_installs(installs: Sequence["pb.InstalledPlan"]) -> None:
    """Hello.installs: what the agent's journals hold. Shape only; whether an install is the approved plan
    is the plans workflow's check (app.domain.plans.Plans.on_hello)."""
    if len(installs) > MAX_INSTALLS:
        raise InvalidInput(f"Hello lists {len(installs)} installs (at most {MAX_INSTALLS})")
    seen: set[str] = set()
    for i in installs:
        if not INSTANCE_RE.match(i.plan_id):
            raise InvalidInput("InstalledPlan.plan_id must be 1 to 64 letters, digits, '-' or '_'")
        if i.plan_id in seen:
            raise InvalidInput(f"install {i.plan_id} is listed twice")
        seen.add(i.plan_id)
        if i.state not in INSTALL_STATES:
            raise InvalidInput(f"install {i.plan_id}: unknown state {excerpt(i.state)}")
        if i.code_sha256 and not DIGEST_RE.match(i.code_sha256):
            raise InvalidInput(f"install {i.plan_id}: code_sha256 is not 64 lowercase hex digits")
        if not 0 < i.pid <= MAX_PID:
            raise InvalidInput(f"install {i.plan_id}: pid {i.pid} is out of range")
        if i.start_time >= 1 << 63 or i.heap >= 1 << 64 or i.heap_len > 1 << 40:
            raise InvalidInput(f"install {i.plan_id}: start time or heap out of range")
        text(i.root, f"install {i.plan_id} root", MAX_SYMBOL, empty=True)


def check_function(f: "pb.Function", expected_index: int) -> int:
    """Check one catalog function against the model's invariants; returns its block count."""
    if f.index != expected_index:
        raise InvalidInput(
            f"function index {f.index} where {expected_index} was due "
            "(functions must be consecutive from 0, in chunk order)"
        )
    text(f.name, f"function {f.index} name", MAX_SYMBOL)
    where = f"function {f.index} ({excerpt(f.name)})"
    if f.size > INT32_MAX:
        raise InvalidInput(f"{where}: size {f.size} is out of range")
    if f.undecodable and f.undecodable_offset >= max(f.size, 1):
        raise InvalidInput(f"{where}: undecodable_offset {f.undecodable_offset} is outside the function")
    if len(f.blocks) > MAX_FUNCTION_BLOCKS:
        raise InvalidInput(f"{where}: too many blocks")
    starts = set()
    end = 0
    for b in f.blocks:
        if b.offset != end:
            raise InvalidInput(f"{where}: blocks do not tile the function (block at {b.offset:#x}, expected {end:#x})")
        if b.size == 0:
            raise InvalidInput(f"{where}: empty block at {b.offset:#x}")
        starts.add(b.offset)
        end = b.offset + b.size
    if f.blocks and end != f.size:
        raise InvalidInput(f"{where}: blocks cover {end:#x} bytes of {f.size:#x}")
    for b in f.blocks:
        if b.instruction_count > b.size:
            raise InvalidInput(f"{where}: block at {b.offset:#x} has more instructions than bytes")
        if len(b.successors) > 4096:
            raise InvalidInput(f"{where}: block at {b.offset:#x} has too many successors")
        for s in b.successors:
            if s.kind in (KIND_FALLTHROUGH, KIND_TAKEN):
                if s.target not in starts:
                    raise InvalidInput(
                        f"{where}: successor of block {b.offset:#x} targets {s.target:#x}, not a block start"
                    )
            elif s.kind == KIND_TAIL_CALL:
                text(s.target_name, f"{where}: tail-call target name", MAX_SYMBOL + 20, empty=True)
                text(s.target_module, f"{where}: tail-call target module", MAX_SYMBOL, empty=True)
            elif s.kind not in (KIND_INDIRECT, KIND_RETURN):
                raise InvalidInput(f"{where}: unknown successor kind {s.kind}")
    for c in f.calls:
        if c.site_offset >= max(f.size, 1):
            raise InvalidInput(f"{where}: call site {c.site_offset:#x} is outside the function")
        text(c.target_name, f"{where}: call target name", MAX_SYMBOL + 20, empty=True)
        text(c.target_module, f"{where}: call target module", MAX_SYMBOL, empty=True)
    for site in f.indirect_call_sites:
        if site >= max(f.size, 1):
            raise InvalidInput(f"{where}: indirect call site {site:#x} is outside the function")
    return len(f.blocks)


def check_batch(batch: "pb.MetricBatch") -> None:
    """Shape and ranges of a metric batch (its time is judged separately, against our clock)."""
    if not 0 < batch.interval_ms <= MAX_INTERVAL_MS:
        raise InvalidInput(f"MetricBatch.interval_ms {batch.interval_ms} is out of range (1..{MAX_INTERVAL_MS})")
    if len(batch.blocks) > MAX_BATCH_BLOCKS:
        raise InvalidInput(f"MetricBatch has {len(batch.blocks)} block entries (at most {MAX_BATCH_BLOCKS})")
    for field in ("total_samples", "user_samples", "unmapped_samples", "lost_samples"):
        if getattr(batch, field) > MAX_COUNT:
            raise InvalidInput(f"MetricBatch.{field} is out of range")
    if batch.idle_samples > batch.total_samples:
        raise InvalidInput("MetricBatch.idle_samples exceeds total_samples")
    counted = idle = 0
    for b in batch.blocks:  # the hottest loop of ingest: one pass, built-ins where they serve
        count = b.count
        if not 0 < count <= MAX_COUNT:
            raise InvalidInput(f"BlockSamples.count {count} is out of range (1..{MAX_COUNT})")
        if b.function_index > INT32_MAX or b.block_offset > INT32_MAX or b.module_index > MAX_MODULES:
            raise InvalidInput("BlockSamples.module_index, function_index or block_offset is out of range")
        counted += count
        if b.idle:
            idle += count
        offsets = b.instruction_offsets
        if offsets:
            counts = b.instruction_counts
            if len(offsets) != len(counts):
                raise InvalidInput("BlockSamples: instruction_offsets and instruction_counts differ in length")
            if 0 in counts or sum(counts) != count:
                raise InvalidInput("BlockSamples: instruction counts must be positive and sum to count")
            if (len(offsets) > 1 and any(a >= c for a, c in itertools.pairwise(offsets))) or offsets[-1] > INT32_MAX:
                raise InvalidInput("BlockSamples: instruction offsets must increase")
        elif b.instruction_counts:
            raise InvalidInput("BlockSamples: instruction_offsets and instruction_counts differ in length")
    if counted + batch.user_samples + batch.unmapped_samples > batch.total_samples:
        raise InvalidInput("MetricBatch: block, user and unmapped samples exceed total_samples")
    if batch.idle_by_context and idle > batch.idle_samples:
        raise InvalidInput("MetricBatch: idle block samples exceed idle_samples")


def check_stacks(st: "pb.StackSamples", total_samples: int) -> BatchStacks:
    """Check a batch's stacks and return them ready to store (BatchStacks): each definition's
    id recomputed from its frames, its modules gathered per stack, and the counts grouped per stack.
    Kernel frames' function indexes are checked against the catalog by the caller."""
    if len(st.stacks) > MAX_STACKS:
        raise InvalidInput(f"StackSamples has {len(st.stacks)} stacks (at most {MAX_STACKS})")
    if len(st.modules) > MAX_FRAME_MODULES or len(st.comms) > MAX_STACK_COUNTS:
        raise InvalidInput("StackSamples has too many modules or command names")
    if len(st.counts) > MAX_STACK_COUNTS:
        raise InvalidInput(f"StackSamples has {len(st.counts)} counts (at most {MAX_STACK_COUNTS})")
    if st.max_depth > 1024 or st.dropped_samples > MAX_COUNT or st.depth_limited_samples > st.stack_samples:
        raise InvalidInput("StackSamples: max_depth, dropped_samples or depth_limited_samples is out of range")
    modules: list[FrameModule] = []
    for m in st.modules:
        if m.kind not in FRAME_KINDS:
            raise InvalidInput(f"FrameModule kind {m.kind} is unknown")
        if m.kind == 1:
            if not DIGEST_RE.match(m.digest):
                raise InvalidInput("FrameModule of a kernel function has an invalid digest")
            text(m.name, "FrameModule.name", MAX_SYMBOL, empty=True)
            modules.append((1, m.digest, m.name))
        elif m.kind == 3:
            text(m.name, "FrameModule.name (a file path)", MAX_PATH)
            modules.append((3, m.name, m.name))
        else:
            modules.append((m.kind, "", ""))
    comms = [text(c, "StackSamples.comms entry", MAX_COMM, empty=True) for c in st.comms]
    out = BatchStacks()
    defined: set[int] = set()
    nframes = 0
    for s in st.stacks:
        if not 0 < len(s.frames) <= MAX_STACK_FRAMES:
            raise InvalidInput(f"stack {s.id:#x} has {len(s.frames)} frames (1..{MAX_STACK_FRAMES})")
        nframes += len(s.frames)
        if nframes > MAX_BATCH_FRAMES:
            raise InvalidInput(f"StackSamples defines more than {MAX_BATCH_FRAMES} frames")
        own: dict[int, int] = {}
        canonical, flat = [], []
        for f in s.frames:
            if f.module >= len(modules):
                raise InvalidInput(f"stack {s.id:#x}: frame module {f.module} is not in StackSamples.modules")
            kind, key, _ = modules[f.module]
            if (kind == 1 and f.offset > INT32_MAX) or f.function_index > INT32_MAX or (kind != 1 and f.function_index):
                raise InvalidInput(f"stack {s.id:#x}: a frame's function index or offset is out of range")
            canonical.append((kind, key, f.function_index, f.offset))
            # Addresses may exceed 2^63: stored as their 64-bit two's complement, like every address.
            flat += [
                own.setdefault(f.module, len(own)),
                f.function_index,
                f.offset - (1 << 64) if f.offset >= (1 << 63) else f.offset,
            ]
        if stack_id(canonical) != s.id:
            raise InvalidInput(f"stack {s.id:#x}: its frames hash to another id")
        if s.id not in defined:
            defined.add(s.id)
            out.defs.append((s.id, [modules[m] for m in own], flat))
    rows: dict[int, tuple[list[int], list[str], list[int], list[int]]] = {}
    counted = 0
    for c in st.counts:
        if not 0 < c.count <= MAX_COUNT or c.pid > MAX_PID or c.cpu > MAX_CPU or c.comm >= len(comms):
            raise InvalidInput("StackCount: count, pid, cpu or comm is out of range")
        counted += c.count
        pids, names, cpus, counts = rows.setdefault(c.stack_id, ([], [], [], []))
        pids.append(c.pid if c.pid < (1 << 31) else c.pid - (1 << 32))  # stored as int4: -1 for an exiting task
        names.append(comms[c.comm])
        cpus.append(c.cpu)
        counts.append(c.count)
    if counted != st.stack_samples:
        raise InvalidInput("StackSamples: counts do not sum to stack_samples")
    if st.stack_samples + st.dropped_samples > total_samples:
        raise InvalidInput("StackSamples: stack and dropped samples exceed the batch's total_samples")
    out.rows = [(sid, sum(v[3]), *v) for sid, v in rows.items()]
    return out


def check_gap(gap: "pb.DataGap", seq: int) -> None:
    if gap.messages == 0 or gap.first_seq == 0 or gap.first_seq + gap.messages != seq + 1:
        raise InvalidInput("DataGap must cover the sequence numbers up to its own (first_seq + messages == seq + 1)")
    if gap.end_unix_ns < gap.start_unix_ns:
        raise InvalidInput("DataGap ends before it starts")
    text(gap.reason, "DataGap.reason", MAX_DETAIL, empty=True)


# Targets, measurements and command results ---------------------------------------------------------

MAX_TARGETS = 512
MAX_MEASUREMENTS = 512
MAX_MEASUREMENT_ROWS = 65536
MAX_INTERNED = 64
TARGET_ID_RE = re.compile(r"^(kernel|p[0-9]{1,10}-[0-9]{1,20})$")
MEASUREMENT_ID_RE = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
TARGET_KINDS = {1: "kernel", 2: "process"}
TARGET_STATES = {1: "attached", 2: "exited", 3: "detached"}
RESOURCE_KINDS = {1: "function", 2: "block", 3: "address"}
METRICS = {
    1: "count",
    2: "wall_ns",
    3: "vtime_ns",
    4: "concurrency",
    5: "wall_per_call_ns",
    6: "vtime_per_call_ns",
    7: "cycles",
    8: "instructions",
    9: "icache_stall",
    10: "branch_mispredict",
}
LABELS = {1: "exact", 2: "sampled", 3: "estimate"}
MEASUREMENT_STATES = {1: "armed", 2: "running", 3: "target_exited", 4: "stopped", 5: "failed"}
MAX_VALUE = float(1 << 62)


def check_module_ref(m: "pb.ModuleRef", where: str) -> None:
    text(m.name, f"{where} module name", MAX_SYMBOL)
    if not DIGEST_RE.match(m.digest):
        raise InvalidInput(f"{where} module {excerpt(m.name)} has an invalid digest (want lower-case hex SHA-256)")
    if m.function_count > MAX_PIECE_FUNCTIONS or m.block_count > MAX_PIECE_BLOCKS:
        raise InvalidInput(f"{where} module {excerpt(m.name)} announces more functions or blocks than allowed")
    if m.build_id and not re.fullmatch(r"[0-9a-f]{2,128}", m.build_id):
        raise InvalidInput(f"{where} module {excerpt(m.name)} has an invalid build id")


def check_target(t: "pb.Target") -> None:
    if not TARGET_ID_RE.match(t.id):
        raise InvalidInput(f"Target.id {excerpt(t.id)} is not 'kernel' or p<pid>-<start time>")
    if t.kind not in TARGET_KINDS or (t.kind == 1) != (t.id == "kernel"):
        raise InvalidInput(f"target {t.id}: kind {t.kind} does not match its id")
    if t.state not in TARGET_STATES:
        raise InvalidInput(f"target {t.id}: unknown state {t.state}")
    text(t.command, f"target {t.id} command", 64, empty=True)
    text(t.executable, f"target {t.id} executable", 4096, empty=True)
    text(t.detail, f"target {t.id} detail", MAX_DETAIL, empty=True)
    if t.pid > INT32_MAX:
        raise InvalidInput(f"target {t.id}: pid out of range")
    if len(t.modules) > MAX_MODULES:
        raise InvalidInput(f"target {t.id} lists {len(t.modules)} modules (at most {MAX_MODULES})")
    names: set[str] = set()
    for m in t.modules:
        check_module_ref(m, f"target {t.id}")
        if m.name in names:
            raise InvalidInput(f"target {t.id}: module {excerpt(m.name)} is listed twice")
        names.add(m.name)


def check_targets(targets: Sequence["pb.Target"]) -> None:
    if len(targets) > MAX_TARGETS:
        raise InvalidInput(f"{len(targets)} targets (at most {MAX_TARGETS})")
    seen: set[str] = set()
    for t in targets:
        check_target(t)
        if t.id in seen:
            raise InvalidInput(f"target {t.id} is listed twice")
        seen.add(t.id)


def check_measurement_info(info: "pb.MeasurementInfo") -> None:
    where = f"measurement {excerpt(info.measurement_id)}"
    if not MEASUREMENT_ID_RE.match(info.measurement_id):
        raise InvalidInput(f"{where}: the id must be 1 to 64 letters, digits, '-' or '_'")
    if not TARGET_ID_RE.match(info.target):
        raise InvalidInput(f"{where}: invalid target {excerpt(info.target)}")
    if info.state not in MEASUREMENT_STATES:
        raise InvalidInput(f"{where}: unknown state {info.state}")
    text(info.detail, f"{where} detail", MAX_DETAIL, empty=True)
    if len(info.resources) > MAX_MEASUREMENT_ROWS:
        raise InvalidInput(f"{where}: {len(info.resources)} rows (at most {MAX_MEASUREMENT_ROWS})")
    if not 0 < info.interval_ms <= MAX_INTERVAL_MS:
        raise InvalidInput(f"{where}: interval {info.interval_ms} ms is out of range")
    for i, r in enumerate(info.resources):
        if not DIGEST_RE.match(r.digest):
            raise InvalidInput(f"{where}: row {i} has an invalid digest")
        if r.kind not in (1, 2):
            raise InvalidInput(f"{where}: row {i} is neither a function nor a block")
        if r.function_index > INT32_MAX or r.block_offset > INT32_MAX or r.size > INT32_MAX:
            raise InvalidInput(f"{where}: row {i} is out of range")
        if r.function_row > len(info.resources) or r.function_row == i + 1:
            raise InvalidInput(f"{where}: row {i} names a function row that does not exist")
        text(r.function, f"{where} row {i} function", MAX_SYMBOL)
        if len(r.metrics) > 16:
            raise InvalidInput(f"{where}: row {i} has too many metrics")
        for p in r.metrics:
            if p.metric not in METRICS or p.label not in LABELS:
                raise InvalidInput(f"{where}: row {i} has an unknown metric or label")
            text(p.mechanism, f"{where} mechanism", MAX_SHORT_TEXT, empty=True)
            text(p.reason, f"{where} reason", MAX_DETAIL, empty=True)
            text(p.unit, f"{where} unit", 32, empty=True)


def check_measurement_batch(b: "pb.MeasurementBatch", rows: int) -> None:
    """Shape and ranges of a measurement batch whose measurement has `rows` rows."""
    where = f"measurement {excerpt(b.measurement_id)}"
    if not MEASUREMENT_ID_RE.match(b.measurement_id):
        raise InvalidInput(f"{where}: the id must be 1 to 64 letters, digits, '-' or '_'")
    if not b.interval_start_unix_ns < b.interval_end_unix_ns <= b.interval_start_unix_ns + MAX_INTERVAL_MS * 10**6:
        raise InvalidInput(f"{where}: the interval is empty, reversed or longer than an hour")
    if b.state not in MEASUREMENT_STATES:
        raise InvalidInput(f"{where}: unknown state {b.state}")
    text(b.detail, f"{where} detail", MAX_DETAIL, empty=True)
    if len(b.units) > MAX_INTERNED or len(b.mechanisms) > MAX_INTERNED:
        raise InvalidInput(f"{where}: too many units or mechanisms")
    for u in b.units:
        text(u, f"{where} unit", 32)
    for m in b.mechanisms:
        text(m, f"{where} mechanism", MAX_SHORT_TEXT, empty=True)
    if len(b.resources) > rows:
        raise InvalidInput(f"{where}: values for {len(b.resources)} rows; it has {rows}")
    for field in ("samples_total", "samples_lost", "frames_dropped", "exits_unmatched"):
        if getattr(b, field) > MAX_COUNT:
            raise InvalidInput(f"{where}: {field} is out of range")
    nunits, nmechs = len(b.units), len(b.mechanisms)
    seen: set[int] = set()
    for rv in b.resources:
        if rv.resource >= rows or rv.resource in seen:
            raise InvalidInput(f"{where}: row {rv.resource} does not exist or is listed twice")
        seen.add(rv.resource)
        if rv.samples > MAX_COUNT or rv.exits > MAX_COUNT or len(rv.values) > 16:
            raise InvalidInput(f"{where}: row {rv.resource} is out of range")
        for v in rv.values:
            if v.metric not in METRICS or v.label not in LABELS:
                raise InvalidInput(f"{where}: row {rv.resource} has an unknown metric or label")
            if v.unit >= nunits or v.mechanism >= nmechs:
                raise InvalidInput(f"{where}: row {rv.resource} names a unit or mechanism the batch lacks")
            if not (0 <= v.value <= MAX_VALUE) or v.total > MAX_COUNT:  # NaN fails the first test too
                raise InvalidInput(f"{where}: row {rv.resource} has a value out of range")
