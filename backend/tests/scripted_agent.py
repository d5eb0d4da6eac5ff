# SPDX-License-Identifier: Apache-2.0
"""A scripted agent client for the backend's tests.

It is a stand-in for hotpathd on the agent side of the real gRPC stream: it replays a deterministic,
generated catalog and deterministic metric batches so the tests can assert exact numbers, and answers
InspectFunction commands with deterministic instructions (or an error, or silence, on request). The
real agent is exercised by its own stream test and the browser tests.
"""
import asyncio
import hashlib
import time

import grpc

from app.proto import pb, pb_grpc

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
            pb.Block(offset=0, size=0x10, instruction_count=4, successors=[
                pb.Successor(kind=pb.SUCCESSOR_KIND_FALLTHROUGH, target=0x10),
                pb.Successor(kind=pb.SUCCESSOR_KIND_TAKEN, target=0x20)]),
            pb.Block(offset=0x10, size=0x10, instruction_count=3, successors=[
                pb.Successor(kind=pb.SUCCESSOR_KIND_FALLTHROUGH, target=0x20)]),
            pb.Block(offset=0x20, size=third, instruction_count=2, successors=[
                pb.Successor(kind=pb.SUCCESSOR_KIND_RETURN)]),
        ]
        calls = []
        if i == 0:
            del blocks[2].successors[:]
            blocks[2].successors.append(
                pb.Successor(kind=pb.SUCCESSOR_KIND_TAIL_CALL, target=0, target_name="ksys_read"))
            calls = [pb.Call(site_offset=0x8, target=0, target_name="__x64_sys_read", target_module="vmlinux")]
        out.append(pb.Function(index=i, name=name, offset=offset, size=size, blocks=blocks, calls=calls,
                               indirect_call_sites=[0xC] if i == 0 else []))
        offset += size
    # Absolute targets on this host for the tail call and the call of function 0.
    out[0].blocks[2].successors[0].target = KERNEL_BASE + out[1].offset
    out[0].calls[0].target = KERNEL_BASE + out[2].offset
    return out


def module_functions(count: int) -> list["pb.Function"]:
    return [pb.Function(index=i, name=f"mod_fn_{i}", offset=0x100 * i, size=0x40, blocks=[
        pb.Block(offset=0, size=0x40, instruction_count=5, successors=[pb.Successor(kind=pb.SUCCESSOR_KIND_RETURN)])])
        for i in range(count)]


def digest_of(tag: str, functions: list["pb.Function"]) -> str:
    h = hashlib.sha256(tag.encode())
    for f in functions:
        h.update(f.SerializeToString(deterministic=True))
    return h.hexdigest()


class ScriptedAgent:
    def __init__(self, target: str, token: str, host_id: str, hostname: str | None = None,
                 modules: list[tuple[str, int, list]] | None = None, chunk_size: int = 500,
                 kernel_tag: str = "build-1") -> None:
        self.target, self.token, self.host_id = target, token, host_id
        self.hostname = hostname or f"host-{host_id}"
        if modules is None:
            modules = [("vmlinux", KERNEL_BASE, kernel_functions(50)), ("hotmod", MODULE_BASE, module_functions(4))]
        self.modules = [(name, base, fns, digest_of(f"{kernel_tag}/{name}", fns)) for name, base, fns in modules]
        self.chunk_size = chunk_size
        self.channel: grpc.aio.Channel | None = None
        self.call = None
        self.welcome: pb.Welcome | None = None
        self.commands: list[pb.Command] = []
        self.answer_mode = "ok"  # "ok", "error" or "silent"
        self._reader: asyncio.Task | None = None

    def hello(self) -> "pb.Hello":
        return pb.Hello(
            host_id=self.host_id, hostname=self.hostname, kernel_release="6.18.0-test", kernel_build_id="ab" * 20,
            cpu_model="Test CPU @ 2.0GHz", cpu_count=2,
            l1i=pb.CacheGeometry(size_bytes=32768, line_bytes=64, ways=8),
            capabilities=[pb.Capability(name="kernel_text_read", available=True, detail="bpf_probe_read_kernel"),
                          pb.Capability(name="hardware_pmu", available=False,
                                        detail="PMU not available: perf_event_open gave ENOENT")],
            modules=[pb.ModuleRef(name=n, digest=d, base_address=b, function_count=len(f),
                                  block_count=sum(len(x.blocks) for x in f)) for n, b, f, d in self.modules],
            agent_version="0.1.0-scripted", metric_interval_ms=1000, sample_frequency_hz=99, sample_event="cpu-clock",
            parse_seconds=0.5)

    def open(self, token: str | None = None):
        self.channel = grpc.aio.insecure_channel(self.target)
        stub = pb_grpc.AgentServiceStub(self.channel)
        self.call = stub.Connect(metadata=[("authorization", f"Bearer {token or self.token}")])
        return self.call

    async def connect(self, send_catalog: bool = True) -> "pb.Welcome":
        """Open the stream, say Hello, read Welcome and send the missing catalog pieces."""
        self.open()
        await self.call.write(pb.AgentMessage(hello=self.hello()))
        reply = await self.call.read()
        assert reply is not grpc.aio.EOF, "stream ended before Welcome"
        self.welcome = reply.welcome
        if send_catalog:
            await self.send_catalog(list(self.welcome.missing_digests))
        self._reader = asyncio.create_task(self._answer_commands())
        return self.welcome

    async def send_catalog(self, digests: list[str]) -> None:
        for name, _base, fns, digest in self.modules:
            if digest not in digests:
                continue
            chunks = [fns[i:i + self.chunk_size] for i in range(0, len(fns), self.chunk_size)] or [[]]
            for seq, part in enumerate(chunks):
                await self.call.write(pb.AgentMessage(catalog_chunk=pb.CatalogChunk(
                    digest=digest, module=name, seq=seq, last=seq == len(chunks) - 1, functions=part)))

    async def send_metrics(self, interval_start_ns: int, blocks: list[tuple[str, int, int, int]],
                           total: int | None = None, user: int = 0) -> None:
        counted = sum(b[3] for b in blocks)
        await self.call.write(pb.AgentMessage(metrics=pb.MetricBatch(
            interval_start_unix_ns=interval_start_ns, interval_ms=1000,
            blocks=[pb.BlockSamples(module=m, function_index=i, block_offset=o, count=c) for m, i, o, c in blocks],
            total_samples=total if total is not None else counted + user, user_samples=user)))

    @staticmethod
    def instructions_for(index: int) -> list["pb.Instruction"]:
        return [pb.Instruction(offset=0, length=4, text="endbr64", bytes=bytes.fromhex("f30f1efa")),
                pb.Instruction(offset=4, length=1, text="push rbp", bytes=b"\x55"),
                pb.Instruction(offset=5, length=3, text=f"mov eax, {index:#x}", bytes=bytes([0xb8, index & 0xFF, 0])),
                pb.Instruction(offset=8, length=1, text="ret", bytes=b"\xc3")]

    async def _answer_commands(self) -> None:
        while True:
            msg = await self.call.read()
            if msg is grpc.aio.EOF:
                return
            if msg.WhichOneof("kind") != "command":
                continue
            self.commands.append(msg.command)
            if self.answer_mode == "silent":
                continue
            ins = msg.command.inspect_function
            if self.answer_mode == "error":
                result = pb.CommandResult(command_id=msg.command.id, ok=False, error="function not in the model")
            else:
                base = next(b for n, b, _f, _d in self.modules if n == ins.module)
                fn = next(f for n, _b, fs, _d in self.modules if n == ins.module for f in fs
                          if f.index == ins.function_index)
                result = pb.CommandResult(command_id=msg.command.id, ok=True, disassembly=pb.FunctionDisassembly(
                    module=ins.module, function_index=ins.function_index, address=base + fn.offset,
                    instructions=self.instructions_for(ins.function_index)))
            await self.call.write(pb.AgentMessage(result=result))

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


async def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05):
    """Poll an async predicate until it returns a truthy value; fail with the last value otherwise."""
    end = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout} s (last value: {value!r})")
        await asyncio.sleep(interval)
