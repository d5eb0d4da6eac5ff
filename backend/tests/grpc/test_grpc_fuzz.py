# SPDX-License-Identifier: Apache-2.0
"""A gRPC fuzzer for AgentService: hypothesis builds arbitrary AgentMessage sequences (every field of
every message kind, generically from the protobuf descriptors, with NUL and control characters, huge
strings, edge integers, out-of-range enums) and a fake agent with a valid certificate sends them
over the real stream, plus raw byte strings that are not messages at all. Every stream must end with
a deliberate status (INVALID_ARGUMENT and the like), never UNKNOWN or INTERNAL, and nothing invalid
may be stored: no sample rows outside the accepted time window, no catalog piece the fuzzer named.

Bounded budget for `make test` (HOTPATH_GRPC_FUZZ_EXAMPLES, default 60, fixed seed)."""

import asyncio
import os
import time

import grpc
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from sqlalchemy import text

from app.protocol.proto import pb

EXAMPLES = int(os.environ.get("HOTPATH_GRPC_FUZZ_EXAMPLES", "60"))
BAD_CODES = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}

_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "vmlinux", "a\x00b", "\x07bell", "x" * 5000, "é中", "name+0x10", "../../etc"]),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x1F), max_size=4),
)
_HEX = st.one_of(
    st.text(alphabet="0123456789abcdef", min_size=64, max_size=64), st.sampled_from(["", "NOT-HEX", "ab" * 40])
)


def _int(bits: int, signed: bool) -> st.SearchStrategy[int]:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    edges = sorted(
        {lo, hi, 0, 1, min(hi, (1 << 31) - 1), min(hi, 1 << 31), min(hi, (1 << 63) - 1), max(lo, -1), min(hi, 4096)}
    )
    return st.one_of(st.sampled_from([e for e in edges if lo <= e <= hi]), st.integers(lo, hi))


FD = FieldDescriptor
_SCALARS = {
    FD.TYPE_UINT32: _int(32, False),
    FD.TYPE_UINT64: _int(64, False),
    FD.TYPE_INT64: _int(64, True),
    FD.TYPE_INT32: _int(32, True),
    FD.TYPE_BOOL: st.booleans(),
    FD.TYPE_DOUBLE: st.floats(allow_nan=True),
    FD.TYPE_BYTES: st.binary(max_size=32),
    FD.TYPE_ENUM: st.integers(0, 7),
    FD.TYPE_FIXED64: _int(64, False),
}


def message(descriptor, depth: int = 0) -> st.SearchStrategy:
    """Any instance of a protobuf message type, fields drawn generically from its descriptor."""
    cls = pb.__dict__.get(descriptor.name) or getattr(pb, descriptor.full_name.split(".")[-1])

    def value(field):
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            return message(field.message_type, depth + 1) if depth < 4 else st.just(None)
        if field.type == FieldDescriptor.TYPE_STRING:
            return _HEX if field.name in ("digest", "digests", "missing_digests") else _TEXT
        return _SCALARS[field.type]

    fields = {}
    for field in descriptor.fields:
        if field.containing_oneof is not None:
            continue
        v = value(field)
        if field.is_repeated:
            fields[field.name] = st.lists(v, max_size=3 if depth < 2 else 1)
        else:
            fields[field.name] = st.one_of(st.none(), v)
    oneofs = [[f for f in o.fields] for o in descriptor.oneofs]

    @st.composite
    def build(draw):
        m = cls()
        for name, strategy in fields.items():
            v = draw(strategy)
            if v is None:
                continue
            f = descriptor.fields_by_name[name]
            if f.is_repeated:
                for item in v:
                    if item is None:
                        continue
                    if f.type == FieldDescriptor.TYPE_MESSAGE:
                        getattr(m, name).add().CopyFrom(item)
                    else:
                        getattr(m, name).append(item)
            elif f.type == FieldDescriptor.TYPE_MESSAGE:
                getattr(m, name).CopyFrom(v)
            else:
                setattr(m, name, v)
        for group in oneofs:
            chosen = draw(st.sampled_from([None, *group]))
            if chosen is None:
                continue
            v = draw(value(chosen))
            if v is not None:
                if chosen.type == FieldDescriptor.TYPE_MESSAGE:
                    getattr(m, chosen.name).CopyFrom(v)
                else:
                    setattr(m, chosen.name, v)
        return m

    return build()


AGENT_MESSAGE = message(pb.AgentMessage.DESCRIPTOR)
HELLO = message(pb.Hello.DESCRIPTOR)
NOW_NS = time.time_ns()


@st.composite
def plausible_batch(draw):
    """A metric batch close to a real one (so it passes the first checks and reaches the deeper ones)."""
    blocks = draw(
        st.lists(
            st.tuples(
                st.sampled_from([0, 1, 2]) | _int(32, False),
                _int(32, False) | st.integers(0, 60),
                st.integers(0, 0x90) | _int(32, False),
                _int(64, False) | st.integers(1, 9),
            ),
            max_size=4,
        )
    )
    start = draw(
        st.sampled_from([NOW_NS - 5 * 10**9, NOW_NS + 10**15, 0, -(1 << 63), NOW_NS - 26 * 3600 * 10**9])
        | st.integers(NOW_NS - 3600 * 10**9, NOW_NS + 60 * 10**9)
    )
    counted = sum(b[3] for b in blocks)
    total = min(draw(st.sampled_from([counted, counted + 1, max(counted - 1, 0)]) | _int(64, False)), (1 << 64) - 1)
    batch = pb.MetricBatch(
        interval_start_unix_ns=start,
        interval_ms=draw(_int(32, False) | st.just(1000)),
        total_samples=total,
        blocks=[pb.BlockSamples(module_index=m, function_index=i, block_offset=o, count=c) for m, i, o, c in blocks],
    )
    if draw(st.booleans()):
        batch.stacks.CopyFrom(draw(plausible_stacks(total)))
    return pb.AgentMessage(
        seq=draw(_int(64, False) | st.integers(0, 20)), instance_id=draw(_TEXT | st.just("")), metrics=batch
    )


@st.composite
def plausible_stacks(draw, total: int):
    """Stacks close to real ones: ids that match their frames (or not), frames in the host's catalog or
    past it, user files, addresses, counts that add up (or not)."""
    from app.protocol.stack_defs import stack_id

    digest = draw(_HEX)
    modules = [
        pb.FrameModule(kind=1, digest=digest, name="vmlinux"),
        pb.FrameModule(kind=3, name=draw(_TEXT)),
        pb.FrameModule(kind=draw(st.integers(0, 5))),
    ]
    stacks = []
    for _ in range(draw(st.integers(0, 3))):
        frames = draw(
            st.lists(
                st.tuples(
                    st.integers(0, 3), st.integers(0, 60) | _int(32, False), st.integers(0, 0x90) | _int(64, False)
                ),
                min_size=0,
                max_size=4,
            )
        )
        pf = [pb.Frame(module=m, function_index=fn if m == 0 else 0, offset=off) for m, fn, off in frames]
        canon = [
            (
                modules[m].kind,
                modules[m].digest if m == 0 else modules[m].name if m == 1 else "",
                fn if m == 0 else 0,
                off,
            )
            for m, fn, off in frames
            if m < len(modules)
        ]
        sid = stack_id(canon) ^ draw(st.sampled_from([0, 0, 1]))
        stacks.append(pb.Stack(id=sid, frames=pf))
    counts = [
        pb.StackCount(
            stack_id=draw(st.sampled_from([s.id for s in stacks]) | _int(64, False))
            if stacks
            else draw(_int(64, False)),
            pid=draw(_int(32, False) | st.integers(0, 100)),
            comm=draw(st.integers(0, 1)),
            cpu=draw(st.integers(0, 3) | _int(32, False)),
            count=draw(st.integers(1, 5) | _int(64, False)),
        )
        for _ in range(draw(st.integers(0, 3)))
    ]
    counted = sum(c.count for c in counts)
    return pb.StackSamples(
        stacks=stacks,
        modules=modules,
        comms=[draw(_TEXT), "dd"],
        counts=counts,
        stack_samples=draw(st.sampled_from([counted, counted + 1])) % (1 << 64),
        max_depth=64,
    )


def _run(backend, agent, hello, messages, raw: list[bytes]) -> grpc.StatusCode | None:
    """One stream, as an agent would send it: the Hello, the messages, the raw byte strings, then half-close;
    the status the server ended it with (None if it did not end in 20 s).

    Through grpcio's synchronous client (run it in a thread): like the agent's own gRPC Core client, it
    reports the status the server sent even when the server ends the stream (a rejected Hello) while
    requests are still being written. grpc.aio's write() cannot be used here: a write that loses that race
    replaces the server's status with a local INTERNAL "Internal error from Core" (debug string 'Failed
    "execute_batch": (SendMessageOperation)'; grpc/grpc#36066), which the fuzzer then blamed on the server,
    in about one run of three under load, and every time for a Hello followed by many messages
    (test_a_rejected_stream_reports_the_servers_status_to_an_agent_still_writing)."""
    creds = agent.credentials
    requests = [pb.AgentMessage(hello=hello).SerializeToString(), *(m.SerializeToString() for m in messages), *raw]
    with grpc.secure_channel(
        backend.grpc_target, grpc.ssl_channel_credentials(creds.ca_pem, creds.key_pem, creds.cert_pem)
    ) as channel:
        call = channel.stream_stream(
            "/hotpath.v1.AgentService/Connect",
            request_serializer=lambda b: b,
            response_deserializer=pb.ServerMessage.FromString,
        )
        try:
            for _reply in call(iter(requests), timeout=20):
                pass
        except grpc.RpcError as err:
            call_error: grpc.Call = err  # type: ignore[assignment] # the sync client's error is also its call
            if call_error.code() == grpc.StatusCode.DEADLINE_EXCEEDED and call_error.details() == "Deadline Exceeded":
                return None  # our own deadline, not a status of the server's
            return call_error.code()
    return grpc.StatusCode.OK


async def test_a_rejected_stream_reports_the_servers_status_to_an_agent_still_writing(backend, unique):
    """A Hello naming another host, then a hundred messages: the server ends the stream at the Hello while the
    agent is still writing; the agent gets PERMISSION_DENIED, every time, never INTERNAL."""
    agent = await backend.agent(f"gfuzz-w-{unique}", kernel_tag=f"gfuzz-w-{unique}")
    hello = agent.hello()
    hello.host_id = f"someone-else-{unique}"
    batch = pb.AgentMessage(seq=1, metrics=pb.MetricBatch(interval_start_unix_ns=NOW_NS, interval_ms=1000))
    outcomes = [await asyncio.to_thread(_run, backend, agent, hello, [batch] * 100, []) for _ in range(20)]
    assert outcomes == [grpc.StatusCode.PERMISSION_DENIED] * 20, outcomes


async def test_agent_service_survives_generated_message_sequences(backend, unique):
    host_id = f"gfuzz-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"gfuzz-{unique}")
    named_digests: set[str] = set()
    generated: list = []

    @seed(20261123)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )
    @given(
        hello=st.one_of(st.none(), HELLO),
        messages=st.lists(AGENT_MESSAGE | plausible_batch(), max_size=5),
        keep_id=st.booleans(),
        raw=st.lists(st.binary(max_size=24), max_size=1),
    )
    def example(hello, messages, keep_id, raw):
        if hello is None:  # a valid Hello, so the messages after it are judged too
            hello = agent.hello()
        elif keep_id:
            hello.host_id = host_id
        for m in hello.modules:
            named_digests.add(m.digest)
        for m in messages:
            if m.WhichOneof("kind") == "catalog_chunk":
                named_digests.add(m.catalog_chunk.digest)
        generated.append((hello, messages, raw))

    # Hypothesis draws the inputs (fixed seed); the live server, on this test session's event loop,
    # judges each of them.
    example()
    outcomes = [
        await asyncio.to_thread(_run, backend, agent, hello, messages, raw) for hello, messages, raw in generated
    ]
    bad = [
        (c, h.host_id[:20], [m.WhichOneof("kind") for m in ms])
        for c, (h, ms, _r) in zip(outcomes, generated, strict=True)
        if c in BAD_CODES
    ]
    assert not bad, f"streams ended with UNKNOWN/INTERNAL: {bad[:5]}"
    assert len(outcomes) == EXAMPLES

    async with backend.runtime.engine.connect() as conn:
        wrong_time = (
            await conn.execute(
                text(
                    "SELECT count(*) FROM sample_intervals WHERE host_id = :h AND (ts > now() + interval '5 minutes' "
                    "OR ts < now() - interval '25 hours')"
                ),
                {"h": host_id},
            )
        ).scalar_one()
        forged = (
            await conn.execute(
                text("SELECT count(*) FROM catalog_pieces WHERE digest = ANY(:d)"), {"d": sorted(named_digests)}
            )
        ).scalar_one()
        staged = (
            await conn.execute(
                text(
                    "SELECT count(*) FROM catalog_pieces WHERE digest LIKE 'staging-%' "
                    "AND stored_at < now() - interval '30 seconds'"
                )
            )
        ).scalar_one()
    assert wrong_time == 0
    assert forged == 0, "a piece the fuzzer named was stored: its content cannot hash to that digest"
    assert staged == 0
    print(
        f"\ngRPC fuzz: {len(outcomes)} streams, statuses "
        f"{sorted({c.name if c else 'TIMEOUT' for c in outcomes})} in {time.process_time():.0f} s CPU"
    )
