# SPDX-License-Identifier: Apache-2.0
"""A scripted agent client for the backend's tests: a fake agent.

It is a stand-in for hotpathd on the agent side of the real gRPC stream: it enrols like an agent
(its own key, a CSR, a one-time token) and connects over mutual TLS, replays a deterministic,
generated catalog (named by the same canonical digest the real agent computes) and deterministic
metric batches so the tests can assert exact numbers, and answers InspectFunction commands with
deterministic instructions (or an error, or silence, on request). It also plays an agent's targets and
measurements: attach (a fake process with a catalog of its own), detach, start and stop measurement,
cancel, with progress and an optional hold so tests can watch a command run. It answers MakePlan with a
real plan (`hotpathd plan --json` of the group fixture, tests/fixtures/plan_group.json, made by
tests/fixtures/make_plan_group.sh and checked against this build's agent by tests/core/test_fixtures.py) renamed to the
root and process asked for, which a test may alter through `plan_edit` to play a lying agent, and
InstallPlan and RevertPlan as an agent that checks the approved hash would (a command sent again gets its
kept answer, as from the real agent's result store; answers may be lost on request). The real agent is exercised by its
own stream test, the browser tests and bench/chaos.
"""

import asyncio
import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.protocol.catalog_digest import piece_digest
from app.protocol.proto import pb, pb_grpc
from app.protocol.stack_defs import stack_id

PLAN_FIXTURE = Path(__file__).parent / "fixtures" / "plan_group.json"
# The process function a hot-set plan lays out first (and so its root).
HOT_SET_FIRST = 3
KERNEL_BASE = 0xFFFFFFFF81000000
MODULE_BASE = 0xFFFFFFFFC0A00000
SPECIAL = ["vfs_read", "ksys_read", "__x64_sys_read", "vfs_read_iter", "rw_verify_area", "do_sys_open"]


def kernel_functions(count: int) -> list["pb.Function"]:
    """`count` functions: the named read path first, then fn_00000…; every function has 3 blocks
    (fallthrough, taken branch, return); function 0 tail-calls function 1 and calls function 2."""
    out = []
    offset = 0x1000
    for i in range(count):
        name = SPECIAL[i] if i < len(SPECIAL) else f"fn_{i:05d}"
        size = 0x30 + (i % 7) * 0x10
        third = size - 0x20
        blocks = [
            pb.Block(
                offset=0,
                size=0x10,
                instruction_count=4,
                successors=[
                    pb.Successor(kind=pb.SUCCESSOR_KIND_FALLTHROUGH, target=0x10),
                    pb.Successor(kind=pb.SUCCESSOR_KIND_TAKEN, target=0x20),
                ],
            ),
            pb.Block(
                offset=0x10,
                size=0x10,
                instruction_count=3,
                successors=[pb.Successor(kind=pb.SUCCESSOR_KIND_FALLTHROUGH, target=0x20)],
            ),
            pb.Block(
                offset=0x20, size=third, instruction_count=2, successors=[pb.Successor(kind=pb.SUCCESSOR_KIND_RETURN)]
            ),
        ]
        calls = []
        if i == 0:
            del blocks[2].successors[:]
            blocks[2].successors.append(
                pb.Successor(
                    kind=pb.SUCCESSOR_KIND_TAIL_CALL, target=0, target_name="ksys_read", target_module="vmlinux"
                )
            )
            calls = [pb.Call(site_offset=0x8, target=0, target_name="__x64_sys_read", target_module="vmlinux")]
        out.append(
            pb.Function(
                index=i,
                name=name,
                offset=offset,
                size=size,
                blocks=blocks,
                calls=calls,
                indirect_call_sites=[0xC] if i == 0 else [],
            )
        )
        offset += size
    # Absolute targets on this host for the tail call and the call of function 0.
    out[0].blocks[2].successors[0].target = KERNEL_BASE + out[1].offset
    out[0].calls[0].target = KERNEL_BASE + out[2].offset
    return out


def module_functions(count: int) -> list["pb.Function"]:
    return [
        pb.Function(
            index=i,
            name=f"mod_fn_{i}",
            offset=0x100 * i,
            size=0x40,
            blocks=[
                pb.Block(
                    offset=0, size=0x40, instruction_count=5, successors=[pb.Successor(kind=pb.SUCCESSOR_KIND_RETURN)]
                )
            ],
        )
        for i in range(count)
    ]


PROCESS_BASE = 0x555555554000
PROCESS_MODULE = "/usr/bin/fake-server"
PROCESS_BUILD_ID = "ab" * 20


def process_functions(count: int = 6) -> list["pb.Function"]:
    """A fake process's executable: functions of 3 blocks (entry, body, exit), like the kernel's."""
    out = []
    for i in range(count):
        out.append(
            pb.Function(
                index=i,
                name=f"srv_fn_{i}",
                offset=0x1000 + 0x100 * i,
                size=0x40,
                blocks=[
                    pb.Block(
                        offset=0,
                        size=0x10,
                        instruction_count=3,
                        successors=[
                            pb.Successor(kind=pb.SUCCESSOR_KIND_FALLTHROUGH, target=0x10),
                            pb.Successor(kind=pb.SUCCESSOR_KIND_TAKEN, target=0x20),
                        ],
                    ),
                    pb.Block(
                        offset=0x10,
                        size=0x10,
                        instruction_count=2,
                        successors=[pb.Successor(kind=pb.SUCCESSOR_KIND_FALLTHROUGH, target=0x20)],
                    ),
                    pb.Block(
                        offset=0x20,
                        size=0x20,
                        instruction_count=4,
                        successors=[pb.Successor(kind=pb.SUCCESSOR_KIND_RETURN)],
                    ),
                ],
            )
        )
    return out


def build_id_of(tag: str) -> str:
    """A kernel build id per test tag, so each test's hosts get catalog pieces of their own."""
    return hashlib.sha1(tag.encode()).hexdigest()


@dataclass
class Credentials:
    """What enrolment leaves an agent with: its key, its certificate, and the CA it trusts."""

    key_pem: bytes
    cert_pem: bytes
    ca_pem: bytes


def make_csr(host_id: str, common_name: str | None = None) -> tuple[bytes, str]:
    """A fresh P-256 key and a CSR for it; returns (key PEM, CSR PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or host_id)]))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, csr.public_bytes(serialization.Encoding.PEM).decode()


async def new_token(runtime, note: str = "scripted agent", host_id: str | None = None) -> str:
    # Imported here: the backend's domain layer (SQLAlchemy, psycopg) takes seconds to import, which
    # a scripted agent run as a program (tests.scripted_agent_cli) does not need.
    from app.domain import enrolment

    async with runtime.sessionmaker() as db:
        _, secret = await enrolment.create_token(db, "tests", note, 1.0, host_id)
        await db.commit()
    return secret


async def enroll(
    enroll_target: str,
    ca_pem: bytes,
    host_id: str,
    token: str,
    hostname: str | None = None,
    csr: tuple[bytes, str] | None = None,
) -> Credentials:
    """Enrol like an agent: EnrollRequest over server-authenticated TLS; returns the credentials."""
    key_pem, csr_pem = csr or make_csr(host_id)
    async with grpc.aio.secure_channel(enroll_target, grpc.ssl_channel_credentials(root_certificates=ca_pem)) as ch:
        stub = pb_grpc.AgentServiceStub(ch)
        reply = await stub.Enroll(
            pb.EnrollRequest(host_id=host_id, hostname=hostname or f"host-{host_id}", token=token, csr_pem=csr_pem),
            timeout=HANG_S,
        )
    return Credentials(key_pem=key_pem, cert_pem=reply.certificate_pem.encode(), ca_pem=reply.ca_pem.encode())


class ScriptedAgent:
    def __init__(
        self,
        target: str,
        credentials: Credentials | None,
        host_id: str,
        hostname: str | None = None,
        modules: list[tuple[str, int, list]] | None = None,
        chunk_size: int = 500,
        kernel_tag: str = "build-1",
        process_build_id: str = PROCESS_BUILD_ID,
        labels: dict[str, str] | None = None,
        kernel_build_id: str | None = None,
        kernel_release: str = "6.18.0-test",
    ) -> None:
        self.target, self.credentials, self.host_id = target, credentials, host_id
        self.hostname = hostname or f"host-{host_id}"
        # Hello.labels, as the real agent reads them from its config file (label.KEY = VALUE lines).
        self.labels: dict[str, str] = dict(labels or {})
        # The kernel build it reports: its tag's, or one given (a fake that joins a real host's build group,
        # e2e/kernel-lane/console.spec.ts: the lane guest's build id and release; its catalog stays this
        # fake's own scripted one).
        self.build_id = kernel_build_id or build_id_of(kernel_tag)
        self.kernel_release = kernel_release
        self.instance_id = uuid.uuid4().hex
        self.seq = 0
        self.acks: list[pb.Ack] = []
        if modules is None:
            modules = [("vmlinux", KERNEL_BASE, kernel_functions(50)), ("hotmod", MODULE_BASE, module_functions(4))]
        core_base = modules[0][1] if modules else 0
        self.modules = [
            (name, base, fns, piece_digest(self.build_id, name, core_base, fns)) for name, base, fns in modules
        ]
        self.chunk_size = chunk_size
        self.channel: grpc.aio.Channel | None = None
        self.call = None
        # gRPC's aio stream takes one write at a time: the command tasks, the reader and the test write
        # through `write`, one after the other (a second write at once fails, and a command task's
        # answer was lost so: a cancelled command never reached "cancelled").
        self._write_lock = asyncio.Lock()
        self.welcome: pb.Welcome | None = None
        self.commands: list[pb.Command] = []
        self.answer_mode = "ok"  # "ok", "error" or "silent"
        self._reader: asyncio.Task | None = None
        # Targets and measurements this fake agent serves and runs (reported in Hello).
        # The attachable process's module: its build id names its catalog piece, so a test that needs a
        # piece no other test stored passes its own.
        fns = process_functions()
        self.process_build_id = process_build_id
        self.process = (
            PROCESS_MODULE,
            PROCESS_BASE,
            fns,
            piece_digest("elf:" + process_build_id, PROCESS_MODULE, PROCESS_BASE, fns),
        )
        self.targets: dict[str, pb.Target] = {}
        self.measurements: dict[str, pb.MeasurementInfo] = {}
        self.hold: asyncio.Event | None = None  # commands report progress and wait for it when set
        self.running: dict[str, asyncio.Task] = {}
        self.cancelled: set[str] = set()
        self.sent_catalogs: list[str] = []
        # Plans: a hook that alters the plan before it is sent (a dict, or the text when it returns a
        # str), and what was installed (plan id → code hash).
        self.plan_edit = None
        self.installed: dict[str, str] = {}
        # Called with ("installed" | "reverted", plan id, the plan's JSON or None) after each install and
        # revert this fake made (tests.scripted_agent_cli reports them to its caller).
        self.on_plan = None
        # When set, installs are made but their answers are lost (as with a backend that went away while
        # the agent installed): the command stays sent.
        self.lose_install_answers = False
        # When set, reverts are made but their answers are lost and not kept (as with an agent killed after
        # the revert and before it kept the answer); or RevertPlan commands are lost before they run.
        self.lose_revert_answers = False
        self.drop_revert_commands = False
        # The answers of InstallPlan and RevertPlan this agent gave, by command id: a command sent again is
        # answered with them and not run twice, as the real agent's result store does.
        self.kept: dict[str, pb.CommandResult] = {}
        # When set, Hello lists these installs as the complete list of what its journals hold
        # (installs_listed); None says nothing about installs, as an agent without a state folder.
        self.hello_installs: list[pb.InstalledPlan] | None = None
        # ComparePlan: per pair, the samples in the plan's code of its original and its installed window
        # (each window has COMPARE_SAMPLES samples; pairs beyond the list repeat its last), and a hook that
        # alters the answer's JSON (a dict) before it is sent, to play a lying or broken agent.
        self.compare_in_plan: list[tuple[int, int]] = list(COMPARE_WITHIN_NOISE)
        self.compare_edit = None

    def hello(self) -> "pb.Hello":
        return pb.Hello(
            host_id=self.host_id,
            hostname=self.hostname,
            kernel_release=self.kernel_release,
            kernel_build_id=self.build_id,
            cpu_model="Test CPU @ 2.0GHz",
            cpu_count=2,
            l1i=pb.CacheGeometry(size_bytes=32768, line_bytes=64, ways=8),
            capabilities=[
                pb.Capability(name="kernel_text_read", available=True, detail="bpf_probe_read_kernel"),
                pb.Capability(
                    name="hardware_pmu", available=False, detail="PMU not available: perf_event_open gave ENOENT"
                ),
            ],
            modules=[
                pb.ModuleRef(
                    name=n, digest=d, base_address=b, function_count=len(f), block_count=sum(len(x.blocks) for x in f)
                )
                for n, b, f, d in self.modules
            ],
            agent_version="0.1.0-scripted",
            metric_interval_ms=1000,
            sample_frequency_hz=99,
            sample_event="cpu-clock",
            parse_seconds=0.5,
            instance_id=self.instance_id,
            clock_unix_ns=time.time_ns(),
            targets=[
                pb.Target(id="kernel", kind=pb.TARGET_KIND_KERNEL, state=pb.TARGET_STATE_ATTACHED),
                *self.targets.values(),
            ],
            measurements=list(self.measurements.values()),
            installs=self.hello_installs or [],
            installs_listed=self.hello_installs is not None,
            labels=[pb.Label(key=k, value=v) for k, v in self.labels.items()],
        )

    def open(self, target: str | None = None, credentials: Credentials | None = None):
        """Open the stream over mutual TLS with this agent's credentials (or the ones given)."""
        creds = credentials or self.credentials
        assert creds is not None, "enrol first"
        channel_creds = grpc.ssl_channel_credentials(
            root_certificates=creds.ca_pem, private_key=creds.key_pem or None, certificate_chain=creds.cert_pem or None
        )
        # As the real agent's channel (daemon/transport.c): an InstallPlan of the largest plan fits.
        self.channel = grpc.aio.secure_channel(
            target or self.target, channel_creds, options=[("grpc.max_receive_message_length", 17 << 20)]
        )
        stub = pb_grpc.AgentServiceStub(self.channel)
        self.call = stub.Connect()
        return self.call

    async def connect(self, send_catalog: bool = True) -> "pb.Welcome":
        """Open the stream, say Hello, read Welcome and send the missing catalog pieces."""
        self.open()
        await self.write(pb.AgentMessage(hello=self.hello()))
        reply = await self.call.read()
        assert reply is not grpc.aio.EOF, "stream ended before Welcome"
        self.welcome = reply.welcome
        if send_catalog:
            await self.send_catalog(list(self.welcome.missing_digests))
        self._reader = asyncio.create_task(self._answer_commands())
        return self.welcome

    @property
    def catalogs(self) -> list[tuple[str, int, list, str]]:
        """Every module this agent has a catalog of: the kernel's (name, base, functions, digest), then its
        attachable process's."""
        return [*self.modules, self.process]

    async def send_catalog(self, digests: list[str]) -> None:
        self.sent_catalogs.extend(digests)
        for name, _base, fns, digest in self.catalogs:
            if digest not in digests:
                continue
            chunks = [fns[i : i + self.chunk_size] for i in range(0, len(fns), self.chunk_size)] or [[]]
            for seq, part in enumerate(chunks):
                await self.write(
                    pb.AgentMessage(
                        catalog_chunk=pb.CatalogChunk(
                            digest=digest, module=name, seq=seq, last=seq == len(chunks) - 1, functions=part
                        )
                    )
                )

    async def send_metrics(
        self,
        interval_start_ns: int,
        blocks: list[tuple[str, int, int, int]],
        total: int | None = None,
        user: int = 0,
        seq: int | None = None,
    ) -> int:
        """Send one batch; numbered (the next sequence number unless `seq` is given; 0 = unnumbered)."""
        counted = sum(b[3] for b in blocks)
        if seq is None:
            self.seq += 1
            seq = self.seq
        await self.write(
            pb.AgentMessage(
                seq=seq,
                metrics=pb.MetricBatch(
                    interval_start_unix_ns=interval_start_ns,
                    interval_ms=1000,
                    blocks=[
                        pb.BlockSamples(module_index=self.module_index(m), function_index=i, block_offset=o, count=c)
                        for m, i, o, c in blocks
                    ],
                    total_samples=total if total is not None else counted + user,
                    user_samples=user,
                ),
            )
        )
        return seq

    def module_index(self, name: str) -> int:
        """The position of a module in Hello.modules (how batches name it); unknown names get an
        index past the end, which the backend must refuse."""
        for i, (n, _b, _f, _d) in enumerate(self.modules):
            if n == name:
                return i
        return len(self.modules) + 7

    async def write(self, msg: "pb.AgentMessage") -> None:
        """Send one message on the stream, after any other write under way."""
        async with self._write_lock:
            await self.call.write(msg)

    async def send_batch(self, batch: "pb.MetricBatch", seq: int | None = None) -> int:
        """Send a prepared batch, numbered like send_metrics."""
        if seq is None:
            self.seq += 1
            seq = self.seq
        await self.write(pb.AgentMessage(seq=seq, metrics=batch))
        return seq

    def stack_batch(
        self,
        interval_start_ns: int,
        samples: list[tuple[list[tuple], int, str, int, int]],
        define: set[int] | None = None,
    ) -> "pb.MetricBatch":
        """A batch with call stacks, as the agent builds one. samples: (frames leaf first, pid, comm, cpu,
        count); a frame is ("k", function index, offset) in the first module (vmlinux), ("m", index, offset)
        in the second, ("u", path, file offset), ("ka", address) or ("ua", address). Kernel leaves are also
        counted as block samples (idle for pid 0) with their instruction; user leaves as user samples.
        `define`: the stack ids whose frames the batch carries (default: all)."""
        modules: list[pb.FrameModule] = []
        module_pos: dict[tuple, int] = {}

        def module(key: tuple) -> int:
            if key not in module_pos:
                module_pos[key] = len(modules)
                if key[0] in ("k", "m"):
                    name, _, _, digest = self.modules[0 if key[0] == "k" else 1]
                    modules.append(pb.FrameModule(kind=pb.FRAME_KIND_KERNEL_FUNCTION, digest=digest, name=name))
                elif key[0] == "u":
                    modules.append(pb.FrameModule(kind=pb.FRAME_KIND_USER_FILE, name=key[1]))
                else:
                    modules.append(
                        pb.FrameModule(
                            kind=pb.FRAME_KIND_KERNEL_ADDRESS if key[0] == "ka" else pb.FRAME_KIND_USER_ADDRESS
                        )
                    )
            return module_pos[key]

        stacks: dict[int, pb.Stack] = {}
        comms: list[str] = []
        counts = []
        blocks: dict[tuple, dict[int, int]] = {}
        user = idle = 0
        for frames, pid, comm, cpu, count in samples:
            pf, canonical = [], []
            for f in frames:
                if f[0] in ("k", "m"):
                    digest = self.modules[0 if f[0] == "k" else 1][3]
                    pf.append(pb.Frame(module=module((f[0],)), function_index=f[1], offset=f[2]))
                    canonical.append((1, digest, f[1], f[2]))
                elif f[0] == "u":
                    pf.append(pb.Frame(module=module(("u", f[1])), offset=f[2]))
                    canonical.append((3, f[1], 0, f[2]))
                else:
                    pf.append(pb.Frame(module=module((f[0],)), offset=f[1]))
                    canonical.append((2 if f[0] == "ka" else 4, "", 0, f[1]))
            sid = stack_id(canonical)
            stacks.setdefault(sid, pb.Stack(id=sid, frames=pf))
            if comm not in comms:
                comms.append(comm)
            counts.append(pb.StackCount(stack_id=sid, pid=pid, comm=comms.index(comm), cpu=cpu, count=count))
            idle += count if pid == 0 else 0
            leaf = frames[0]
            if leaf[0] in ("k", "m"):
                mod_name, _, fns, _ = self.modules[0 if leaf[0] == "k" else 1]
                fn = fns[leaf[1]]
                block = max(b.offset for b in fn.blocks if b.offset <= leaf[2])
                per_pc = blocks.setdefault((mod_name, leaf[1], block, pid == 0), {})
                per_pc[leaf[2] - block] = per_pc.get(leaf[2] - block, 0) + count
            elif leaf[0] in ("u", "ua"):
                user += count
        block_samples = [
            pb.BlockSamples(
                module_index=self.module_index(m),
                function_index=i,
                block_offset=o,
                idle=idl,
                count=sum(pcs.values()),
                instruction_offsets=sorted(pcs),
                instruction_counts=[pcs[k] for k in sorted(pcs)],
            )
            for (m, i, o, idl), pcs in blocks.items()
        ]
        total = sum(c.count for c in counts)
        unmapped = total - user - sum(b.count for b in block_samples)
        return pb.MetricBatch(
            interval_start_unix_ns=interval_start_ns,
            interval_ms=1000,
            blocks=block_samples,
            total_samples=total,
            user_samples=user,
            unmapped_samples=unmapped,
            idle_samples=idle,
            idle_by_context=True,
            stacks=pb.StackSamples(
                stacks=[s for sid, s in stacks.items() if define is None or sid in define],
                modules=modules,
                comms=comms,
                counts=counts,
                stack_samples=total,
                max_depth=64,
            ),
        )

    @staticmethod
    def instructions_for(index: int) -> list["pb.Instruction"]:
        return [
            pb.Instruction(offset=0, length=4, text="endbr64", bytes=bytes.fromhex("f30f1efa")),
            pb.Instruction(offset=4, length=1, text="push rbp", bytes=b"\x55"),
            pb.Instruction(offset=5, length=3, text=f"mov eax, {index:#x}", bytes=bytes([0xB8, index & 0xFF, 0])),
            pb.Instruction(offset=8, length=1, text="ret", bytes=b"\xc3"),
        ]

    async def _answer_commands(self) -> None:
        while True:
            msg = await self.call.read()
            if msg is grpc.aio.EOF:
                return
            if msg.WhichOneof("kind") == "ack":
                self.acks.append(msg.ack)
                continue
            if msg.WhichOneof("kind") == "catalog_request":
                await self.send_catalog(list(msg.catalog_request.digests))
                continue
            if msg.WhichOneof("kind") != "command":
                continue
            self.commands.append(msg.command)
            if self.answer_mode == "silent":
                continue
            if msg.command.WhichOneof("kind") == "cancel":
                target = msg.command.cancel.command_id
                known = target in self.running
                if known:
                    self.cancelled.add(target)
                await self.write(
                    pb.AgentMessage(
                        result=pb.CommandResult(
                            command_id=msg.command.id, ok=known, error="" if known else "not running"
                        )
                    )
                )
                continue
            if msg.command.id in self.kept:
                await self.write(pb.AgentMessage(result=self.kept[msg.command.id]))
                continue
            if msg.command.WhichOneof("kind") == "revert_plan" and self.drop_revert_commands:
                continue
            if msg.command.WhichOneof("kind") != "inspect_function":
                if msg.command.id not in self.running:
                    self.running[msg.command.id] = asyncio.create_task(self._run(msg.command))
                continue
            ins = msg.command.inspect_function
            if self.answer_mode == "error":
                result = pb.CommandResult(command_id=msg.command.id, ok=False, error="function not in the model")
            elif (
                found := next(
                    (
                        (b, f)
                        for _n, b, fs, d in self.catalogs
                        if d == ins.digest
                        for f in fs
                        if f.index == ins.function_index
                    ),
                    None,
                )
            ) is None:
                # As the real agent answers a function it does not have (a kernel module's or the attached
                # process's), not an exception that would end this reader and every later command.
                result = pb.CommandResult(
                    command_id=msg.command.id,
                    ok=False,
                    error=f"no function {ins.function_index} in catalog {ins.digest[:16]}",
                )
            else:
                base, fn = found
                result = pb.CommandResult(
                    command_id=msg.command.id,
                    ok=True,
                    disassembly=pb.FunctionDisassembly(
                        digest=ins.digest,
                        function_index=ins.function_index,
                        address=base + fn.offset,
                        instructions=self.instructions_for(ins.function_index),
                    ),
                )
            await self.write(pb.AgentMessage(result=result))

    async def _run(self, command: "pb.Command") -> None:
        try:
            if self.hold is not None:
                await self.write(
                    pb.AgentMessage(progress=pb.Progress(command_id=command.id, fraction=0.5, message="halfway"))
                )
                while not self.hold.is_set() and command.id not in self.cancelled:  # noqa: ASYNC110 - two conditions
                    await asyncio.sleep(0.02)
            if command.id in self.cancelled:
                result = pb.CommandResult(command_id=command.id, ok=False, cancelled=True, error="cancelled")
            else:
                result = await self.answer(command)
            if command.WhichOneof("kind") == "install_plan" and self.lose_install_answers:
                return
            if command.WhichOneof("kind") == "revert_plan" and self.lose_revert_answers:
                return
            if command.WhichOneof("kind") in ("install_plan", "revert_plan"):
                self.kept[command.id] = result
            await self.write(pb.AgentMessage(result=result))
        except grpc.aio.AioRpcError:
            pass
        finally:
            self.running.pop(command.id, None)

    def target_for(self, pid: int) -> "pb.Target":
        name, base, fns, digest = self.process
        return pb.Target(
            id=f"p{pid}-1000",
            kind=pb.TARGET_KIND_PROCESS,
            pid=pid,
            command="fake-server",
            executable=name,
            state=pb.TARGET_STATE_ATTACHED,
            attached_unix_ns=time.time_ns(),
            modules=[
                pb.ModuleRef(
                    name=name,
                    digest=digest,
                    base_address=base,
                    function_count=len(fns),
                    block_count=sum(len(f.blocks) for f in fns),
                    build_id=self.process_build_id,
                )
            ],
        )

    def rows_for(self, req: "pb.StartMeasurement") -> list["pb.MeasuredResource"]:
        """Rows as an agent arms them: a function (and its blocks when asked), or one block."""
        rows: list[pb.MeasuredResource] = []
        plans = [
            pb.MetricPlan(
                metric=pb.METRIC_COUNT,
                available=True,
                label=pb.VALUE_LABEL_EXACT,
                mechanism="uprobe_multi",
                unit="calls",
            )
        ]
        if "wall" in req.metrics:
            plans.append(
                pb.MetricPlan(
                    metric=pb.METRIC_WALL_NS,
                    available=True,
                    label=pb.VALUE_LABEL_EXACT,
                    mechanism="uprobe_multi+uretprobe_multi",
                    unit="ns",
                )
            )
        # Like the real agent on these VMs: the hardware counters are unavailable, with the reason.
        for name, metric in (
            ("cycles", pb.METRIC_CYCLES),
            ("instructions", pb.METRIC_INSTRUCTIONS),
            ("icache_stall", pb.METRIC_ICACHE_STALL),
            ("branch_mispredict", pb.METRIC_BRANCH_MISPREDICT),
        ):
            if name in req.metrics:
                plans.append(
                    pb.MetricPlan(
                        metric=metric,
                        available=False,
                        label=pb.VALUE_LABEL_EXACT,
                        reason="no hardware PMU: perf_event_open(cycles) failed with ENOENT",
                    )
                )
        every = self.catalogs
        for r in req.resources:
            _n, base, fns, _d = next(m for m in every if m[3] == r.digest)
            f = fns[r.function_index]
            if r.kind == pb.RESOURCE_KIND_BLOCK:
                rows.append(
                    pb.MeasuredResource(
                        digest=r.digest,
                        function_index=f.index,
                        kind=pb.RESOURCE_KIND_BLOCK,
                        block_offset=r.offset,
                        function=f.name,
                        address=base + f.offset + r.offset,
                        size=0x10,
                        metrics=plans[:1],
                    )
                )
                continue
            rows.append(
                pb.MeasuredResource(
                    digest=r.digest,
                    function_index=f.index,
                    kind=pb.RESOURCE_KIND_FUNCTION,
                    function=f.name,
                    address=base + f.offset,
                    size=f.size,
                    metrics=plans,
                )
            )
            if r.blocks:
                row = len(rows)
                for b in f.blocks:
                    rows.append(
                        pb.MeasuredResource(
                            digest=r.digest,
                            function_index=f.index,
                            kind=pb.RESOURCE_KIND_BLOCK,
                            block_offset=b.offset,
                            function=f.name,
                            address=base + f.offset + b.offset,
                            size=b.size,
                            function_row=row,
                            metrics=plans[:1],
                        )
                    )
        return rows

    async def answer(self, command: "pb.Command") -> "pb.CommandResult":
        """What this fake agent does for a command (not inspect): attach, detach, start, stop."""
        kind = command.WhichOneof("kind")
        if kind == "attach_target":
            pid = command.attach_target.pid or 4242
            t = self.target_for(pid)
            self.targets[t.id] = t
            await self.write(
                pb.AgentMessage(
                    targets=pb.TargetsUpdate(
                        targets=[
                            pb.Target(id="kernel", kind=pb.TARGET_KIND_KERNEL, state=pb.TARGET_STATE_ATTACHED),
                            *self.targets.values(),
                        ]
                    )
                )
            )
            return pb.CommandResult(command_id=command.id, ok=True, targets=pb.TargetsUpdate(targets=[t]))
        if kind == "detach_target":
            t = self.targets.get(command.detach_target.target)
            if t is None:
                return pb.CommandResult(command_id=command.id, ok=False, error="no such target")
            t.state = pb.TARGET_STATE_DETACHED
            return pb.CommandResult(command_id=command.id, ok=True, targets=pb.TargetsUpdate(targets=[t]))
        if kind == "start_measurement":
            req = command.start_measurement
            # As the real agent refuses to measure a function of a catalog it does not have (a derived
            # kernel plan's root in a module this fake does not load), not an exception that would leave
            # the command unanswered.
            missing = [r.digest for r in req.resources if r.digest not in {m[3] for m in self.catalogs}]
            if missing:
                return pb.CommandResult(
                    command_id=command.id, ok=False, error=f"no catalog {missing[0][:16]} on this host"
                )
            info = self.measurements.get(req.measurement_id)
            if info is None:
                info = pb.MeasurementInfo(
                    measurement_id=req.measurement_id,
                    target=req.target,
                    state=pb.MEASUREMENT_STATE_ARMED,
                    resources=self.rows_for(req),
                    interval_ms=req.interval_ms or 1000,
                    started_unix_ns=time.time_ns(),
                    request=req,
                )
                self.measurements[req.measurement_id] = info
            return pb.CommandResult(command_id=command.id, ok=True, measurement=info)
        if kind == "stop_measurement":
            info = self.measurements.get(command.stop_measurement.measurement_id)
            if info is None:
                return pb.CommandResult(command_id=command.id, ok=False, error="no such measurement")
            info.state = pb.MEASUREMENT_STATE_STOPPED
            info.ended_unix_ns = time.time_ns()
            return pb.CommandResult(command_id=command.id, ok=True, measurement=info)
        if kind == "make_plan":
            return self.plan_answer(command)
        if kind == "install_plan":
            ip = command.install_plan
            plan = json.loads(ip.plan_json)
            from app.domain.plan_check import Code, code_hash

            have = code_hash(Code.model_validate(plan["code"]))
            if have != ip.approved_code_sha256 or have != plan["code"]["sha256"]:
                detail = {"status": "refused", "root": plan["root"], "error": "the plan's code is not the approved one"}
                return pb.CommandResult(
                    command_id=command.id,
                    ok=True,
                    install=pb.InstallResult(plan_id=ip.plan_id, status="refused", detail_json=json.dumps(detail)),
                )
            built = plan["target"].get("build_id", "")
            if plan["target"].get("kind") == "kernel" and built != self.build_id:
                # As the real agent's kernel target (replace/kernel_target.c, module_base): a kernel plan of
                # another kernel build is refused before anything is read.
                error = f"the plan is for another kernel build (build id {built[:16]}...): plan again on this kernel"
                detail = {"status": "refused", "root": plan["root"], "error": error}
                return pb.CommandResult(
                    command_id=command.id,
                    ok=True,
                    install=pb.InstallResult(plan_id=ip.plan_id, status="refused", detail_json=json.dumps(detail)),
                )
            self.installed[ip.plan_id] = have
            if self.on_plan is not None:
                self.on_plan("installed", ip.plan_id, plan)
            detail = {
                "status": "installed",
                "root": plan["root"],
                "code_sha256": have,
                "heap": "0x7f0000000000",
                "call_sites": 3,
                "timings": {"entry_us": 61.0, "total_ms": 4.2},
            }
            return pb.CommandResult(
                command_id=command.id,
                ok=True,
                install=pb.InstallResult(plan_id=ip.plan_id, status="installed", detail_json=json.dumps(detail)),
            )
        if kind == "list_installed":
            listed = [
                {"id": pid, "state": "installed", "pid": 4242, "code_sha256": h, "heap": "0x7f0000000000"}
                for pid, h in self.installed.items()
            ]
            return pb.CommandResult(
                command_id=command.id,
                ok=True,
                install=pb.InstallResult(
                    status="listed", detail_json=json.dumps({"status": "listed", "installed": listed})
                ),
            )
        if kind == "compare_plan":
            return await self.compare_answer(command)
        if kind == "revert_plan":
            rp = command.revert_plan
            if self.installed.pop(rp.plan_id, None):
                if self.on_plan is not None:
                    self.on_plan("reverted", rp.plan_id, None)
                return pb.CommandResult(
                    command_id=command.id,
                    ok=True,
                    install=pb.InstallResult(
                        plan_id=rp.plan_id, status="reverted", detail_json=json.dumps({"status": "reverted"})
                    ),
                )
            # As the real agent: a revert of an id its journals do not hold fails, saying so.
            error = f"nothing is installed under the id {rp.plan_id}"
            return pb.CommandResult(
                command_id=command.id,
                ok=False,
                error=error,
                install=pb.InstallResult(
                    plan_id=rp.plan_id,
                    status="nothing_installed",
                    detail_json=json.dumps({"status": "nothing_installed", "error": error}),
                ),
            )
        return pb.CommandResult(command_id=command.id, ok=False, error="unsupported command")

    async def compare_answer(self, command: "pb.Command") -> "pb.CommandResult":
        """An interleaved comparison in the contract's shape (windows of this agent's scripted counts, a
        summary the backend must not use), with a Progress after every window as the real agent sends."""
        cp = command.compare_plan
        if cp.plan_id not in self.installed:
            return pb.CommandResult(command_id=command.id, ok=False, error=f"not installed: {cp.plan_id}")
        pid, _start = cp.target[1:].split("-")
        windows, t = [], time.time_ns()
        for pair in range(cp.pairs):
            counts = self.compare_in_plan[min(pair, len(self.compare_in_plan) - 1)]
            arms = ("original", "installed") if pair % 2 == 0 else ("installed", "original")
            for arm in arms:
                in_plan = counts[0] if arm == "original" else counts[1]
                windows.append(
                    {
                        "pair": pair,
                        "arm": arm,
                        "start_unix_ns": t,
                        "seconds": cp.window_seconds,
                        "samples": COMPARE_SAMPLES,
                        "samples_in_plan": in_plan,
                        "cpu_seconds": 0.99,
                    }
                )
                t += int(cp.window_seconds * 1e9) + 1000
                await self.write(
                    pb.AgentMessage(
                        progress=pb.Progress(
                            command_id=command.id,
                            fraction=len(windows) / (2 * cp.pairs),
                            message=f"pair {pair + 1}/{cp.pairs}: {arm}, "
                            f"{100 * in_plan / COMPARE_SAMPLES:.1f}% of samples in the plan's code",
                        )
                    )
                )
        detail = {
            "id": cp.plan_id,
            "pid": int(pid),
            "root": "srv_fn_2",
            "members": 3,
            "pairs": cp.pairs,
            "window_seconds": cp.window_seconds,
            "sample_hz": 997,
            "windows": windows,
            "summary": {
                "share_original": 0.5,
                "share_installed": 0.25,
                "change": -0.5,
                "interval": [-0.6, -0.4],
                "confidence": 0.95,
                "verdict": "faster",
            },
            "toggle_ms": {"revert": 1.5, "install": 2.5},
            "state": "installed",
        }
        if self.compare_edit is not None:
            self.compare_edit(detail)
        return pb.CommandResult(
            command_id=command.id,
            ok=True,
            compare=pb.CompareResult(plan_id=cp.plan_id, detail_json=json.dumps(detail)),
        )

    def plan_answer(self, command: "pb.Command") -> "pb.CommandResult":
        """A real plan of the group fixture, renamed to the root and process asked for."""
        mp = command.make_plan
        every = self.catalogs
        if mp.hot_set:  # the process's hot set: its function HOT_SET_FIRST laid out first
            if mp.target == "kernel" or mp.digest not in ("", self.process[3]):
                return pb.CommandResult(command_id=command.id, ok=False, error="no such process module")
            fns, index = self.process[2], HOT_SET_FIRST
        else:
            fns, index = next((m[2] for m in every if m[3] == mp.digest), None), mp.function_index
        if fns is None or index >= len(fns):
            return pb.CommandResult(command_id=command.id, ok=False, error="root not found")
        root = fns[index].name
        text = PLAN_FIXTURE.read_text().replace('"pr_root', f'"{root}')
        plan = json.loads(text)
        if mp.hot_set:
            plan["options"].update(hot_set=True, hot_share=0.99)
        if mp.target != "kernel":
            pid, start = mp.target[1:].split("-")
            plan["target"].update(
                pid=int(pid), start_time=int(start), module=PROCESS_MODULE, module_build_id=self.process_build_id
            )
        edited = self.plan_edit(plan) if self.plan_edit else None
        out = edited if isinstance(edited, str) else json.dumps(plan)
        code = plan.get("code") or {}
        return pb.CommandResult(
            command_id=command.id,
            ok=True,
            plan=pb.PlanResult(
                plan_id=mp.plan_id,
                plan_json=out,
                code_sha256=code.get("sha256", ""),
                build_id=plan["target"].get("module_build_id") or plan["target"].get("build_id", ""),
            ),
        )

    async def send_measurement(
        self,
        measurement_id: str,
        start_ns: int,
        values: list[tuple[int, int, float]],
        state: int = pb.MEASUREMENT_STATE_RUNNING,
        seconds: float = 1.0,
        detail: str = "",
        seq: int | None = None,
        edges: list["pb.EdgeCount"] | None = None,
    ) -> int:
        """One interval of a measurement: values are (row, count, wall_ns) (wall 0 = not measured); edges
        as the agent derives them."""
        if seq is None:
            self.seq += 1
            seq = self.seq
        resources = []
        for row, count, wall in values:
            vals = [
                pb.MetricValue(
                    metric=pb.METRIC_COUNT, value=count, total=count, unit=0, label=pb.VALUE_LABEL_EXACT, mechanism=0
                )
            ]
            if wall:
                vals.append(
                    pb.MetricValue(
                        metric=pb.METRIC_WALL_NS,
                        value=wall,
                        total=int(wall),
                        unit=1,
                        label=pb.VALUE_LABEL_EXACT,
                        mechanism=0,
                    )
                )
            resources.append(pb.ResourceValues(resource=row, values=vals, exits=count if wall else 0))
        await self.write(
            pb.AgentMessage(
                seq=seq,
                measurement=pb.MeasurementBatch(
                    measurement_id=measurement_id,
                    interval_start_unix_ns=start_ns,
                    interval_end_unix_ns=start_ns + int(seconds * 1e9),
                    state=state,
                    detail=detail,
                    resources=resources,
                    units=["calls", "ns"],
                    mechanisms=["uprobe_multi"],
                    edges=edges or [],
                ),
            )
        )
        return seq

    async def close(self) -> None:
        """End the stream as an agent that exits cleanly does."""
        if self.call is not None:
            try:
                await self.call.done_writing()
            except Exception:  # noqa: BLE001, S110 - the server may already have ended it
                pass
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 5)
            except (TimeoutError, grpc.aio.AioRpcError):
                self._reader.cancel()
        if self.channel is not None:
            await self.channel.close()


# How long a test waits for something that is bound to happen (a state reached, a message delivered)
# before it calls it a hang. Not a speed check: a passing test goes on as soon as the condition holds,
# and on a loaded machine (three test runs and a stress load on 2 cores) a command's round trip through
# the backend, Postgres' notifications and an agent took more than 10 s.
HANG_S = 60.0
# The scripted ComparePlan's windows: samples per window, and per pair the samples in the plan's code of
# the original and the installed window. Within noise: the differences (+1, -2, +1, -2, +3, -1 of 1000)
# change sign; slower: every pair's installed window has 20 to 24 more (the plan's code took ~10% more).
COMPARE_SAMPLES = 1000
COMPARE_WITHIN_NOISE = ((200, 201), (205, 203), (198, 199), (202, 200), (201, 204), (199, 198))
COMPARE_SLOWER = ((200, 221), (204, 224), (198, 220), (202, 222), (201, 223), (199, 221))


async def wait_until(predicate, timeout: float = HANG_S, interval: float = 0.05):
    """Poll an async predicate until it returns a truthy value; fail with the last value otherwise."""
    end = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout} s (last value: {value!r})")
        await asyncio.sleep(interval)


async def wait_catalog_complete(client, host_id: str, timeout: float = 10.0) -> None:
    """Until the backend reports the host's catalog stored complete (GET /hosts/{id})."""

    async def complete():
        r = await client.get(f"/api/v1/hosts/{host_id}")
        return r.status_code == 200 and r.json()["catalog_complete"]

    await wait_until(complete, timeout)


async def wait_for_ack(agent: ScriptedAgent, seq: int, timeout: float = 10.0) -> None:
    async def acked():
        return any(a.seq >= seq and a.instance_id == agent.instance_id for a in agent.acks)

    await wait_until(acked, timeout)
