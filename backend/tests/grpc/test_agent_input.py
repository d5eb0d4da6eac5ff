# SPDX-License-Identifier: Apache-2.0
"""Nothing an agent sends is stored before it is checked: a fake agent (tests.scripted_agent) sends
malformed catalogs, hellos and batches over the real stream; each ends with INVALID_ARGUMENT and a
reason (never UNKNOWN or SQL text), and nothing of it is stored or shared with other hosts."""

import asyncio
import threading
import time

import grpc
import pytest

from app.protocol import agent_input
from app.protocol.proto import pb
from app.storage import catalog
from tests.scripted_agent import HANG_S, kernel_functions, wait_catalog_complete, wait_for_ack, wait_until


async def _ended(agent) -> grpc.aio.AioRpcError:
    """Wait for the server to end the agent's stream; return the error it ended with."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        if agent._reader is not None:  # the fake agent's own reader sees the end
            await agent._reader
            pytest.fail("the stream ended without a status")
        while True:
            msg = await agent.call.read()
            if msg is grpc.aio.EOF:
                pytest.fail("the stream ended without a status")
    return err.value


async def _hello_only(backend, host_id, hello_edit):
    agent = await backend.agent(host_id)
    hello = agent.hello()
    hello_edit(hello)
    call = agent.open()
    await call.write(pb.AgentMessage(hello=hello))
    error = await _ended(agent)
    await agent.channel.close()
    return error


async def _chunks(agent, digest, module, chunks):
    for seq, last, fns in chunks:
        await agent.write(
            pb.AgentMessage(
                catalog_chunk=pb.CatalogChunk(digest=digest, module=module, seq=seq, last=last, functions=fns)
            )
        )


async def test_chunks_out_of_order_end_the_stream_and_store_nothing(backend, unique):
    agent = await backend.agent(
        f"order-{unique}", kernel_tag=f"order-{unique}", modules=[("vmlinux", 0xFFFFFFFF81000000, kernel_functions(30))]
    )
    await agent.connect(send_catalog=False)
    name, _base, fns, digest = agent.modules[0]
    await _chunks(agent, digest, name, [(1, False, fns[10:20]), (0, False, fns[:10]), (2, True, fns[20:])])
    error = await _ended(agent)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "arrived before chunk 0" in error.details()
    assert await backend.scalar("SELECT count(*) FROM catalog_pieces WHERE digest = :d", d=digest) == 0
    assert await backend.scalar("SELECT count(*) FROM functions WHERE digest = :d", d=digest) == 0
    await agent.close()


async def test_a_skipped_chunk_ends_the_stream(backend, unique):
    agent = await backend.agent(
        f"skip-{unique}", kernel_tag=f"skip-{unique}", modules=[("vmlinux", 0xFFFFFFFF81000000, kernel_functions(30))]
    )
    await agent.connect(send_catalog=False)
    name, _base, fns, digest = agent.modules[0]
    await _chunks(agent, digest, name, [(0, False, fns[:10]), (2, True, fns[20:])])
    error = await _ended(agent)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "chunk 2" in error.details() and "where 1 was due" in error.details()
    assert await backend.scalar("SELECT count(*) FROM catalog_pieces WHERE digest LIKE 'staging-%'") == 0
    await agent.close()


async def test_a_stream_ended_as_its_upload_begins_leaves_no_staged_piece(backend, unique, monkeypatch):
    """The stream ends while the backend is between committing an upload's staging piece and recording the
    upload in its session (the handler is cancelled there): the piece is still discarded, not left until
    the backend's next start. A staging piece left so was found by the gRPC fuzz test at load."""
    real = catalog.begin_upload
    staged: list[str] = []
    committed = asyncio.Event()

    async def begin_then_wait(engine, staging, *args):
        await real(engine, staging, *args)
        staged.append(staging)
        committed.set()
        await asyncio.sleep(3600)  # the stream's end cancels the handler here

    monkeypatch.setattr(catalog, "begin_upload", begin_then_wait)
    agent = await backend.agent(
        f"cut-{unique}", kernel_tag=f"cut-{unique}", modules=[("vmlinux", 0xFFFFFFFF81000000, kernel_functions(30))]
    )
    await agent.connect(send_catalog=False)
    name, _base, fns, digest = agent.modules[0]
    await _chunks(agent, digest, name, [(0, False, fns[:10])])
    await asyncio.wait_for(committed.wait(), HANG_S)
    assert await backend.scalar("SELECT count(*) FROM catalog_pieces WHERE digest = :s", s=staged[0]) == 1
    await agent.close()
    monkeypatch.undo()

    async def discarded():
        return await backend.scalar("SELECT count(*) FROM catalog_pieces WHERE digest = :s", s=staged[0]) == 0

    await wait_until(discarded)


async def test_an_empty_last_chunk_does_not_complete_a_piece_announced_with_functions(backend, unique):
    agent = await backend.agent(
        f"empty-{unique}", kernel_tag=f"empty-{unique}", modules=[("vmlinux", 0xFFFFFFFF81000000, kernel_functions(30))]
    )
    await agent.connect(send_catalog=False)
    name, _base, _fns, digest = agent.modules[0]
    await _chunks(agent, digest, name, [(0, True, [])])
    error = await _ended(agent)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ended after 0 functions" in error.details()
    assert await backend.scalar("SELECT count(*) FROM catalog_pieces WHERE digest = :d", d=digest) == 0
    await agent.close()


async def test_a_forged_piece_is_refused_and_never_shared_with_an_honest_host(backend, client, unique):
    """A fake agent announces the digest of an honest host's kernel and uploads other content: the
    recomputed digest differs, the piece is discarded, and the honest host still uploads and sees the
    real functions only."""
    tag = f"forge-{unique}"
    honest_fns = kernel_functions(30)
    forger = await backend.agent(
        f"forger-{unique}", kernel_tag=tag, modules=[("vmlinux", 0xFFFFFFFF81000000, honest_fns)]
    )
    await forger.connect(send_catalog=False)
    name, _base, fns, digest = forger.modules[0]
    forged = [pb.Function() for _ in fns]
    for f, real in zip(forged, fns, strict=True):
        f.CopyFrom(real)
    forged[3].name = "FAKE_do_not_trust"
    await _chunks(forger, digest, name, [(0, True, forged)])
    error = await _ended(forger)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "hashes to" in error.details()
    assert await backend.scalar("SELECT count(*) FROM functions WHERE name = 'FAKE_do_not_trust'") == 0
    assert (
        await backend.scalar(
            "SELECT count(*) FROM audit_log WHERE action = 'catalog_rejected' AND target = :h", h=f"forger-{unique}"
        )
        == 1
    )
    await forger.close()

    honest = await backend.agent(
        f"honest-{unique}", kernel_tag=tag, modules=[("vmlinux", 0xFFFFFFFF81000000, honest_fns)]
    )
    welcome = await honest.connect()
    assert list(welcome.missing_digests) == [digest], "the forged upload must not count as stored"

    await wait_catalog_complete(client, f"honest-{unique}")
    found = (await client.get(f"/api/v1/hosts/honest-{unique}/functions", params={"q": "FAKE"})).json()
    assert found["total"] == 0
    assert await backend.scalar("SELECT count(*) FROM functions WHERE digest = :d", d=digest) == 30
    await honest.close()


async def test_a_piece_whose_named_targets_lie_about_their_address_is_refused(backend, client, unique):
    """The digest covers a named target as (module, function, offset), not its address: a lying agent sends
    an honest piece whose call and tail call name __x64_sys_read and ksys_read but point at fn_00007. The
    backend checks each same-module target against the function it names and refuses the piece; an honest
    host then stores it with the right targets."""
    tag = f"liar-{unique}"
    honest_fns = kernel_functions(30)
    lying = [pb.Function() for _ in honest_fns]
    for f, real in zip(lying, honest_fns, strict=True):
        f.CopyFrom(real)
    wrong = 0xFFFFFFFF81000000 + honest_fns[7].offset
    lying[0].calls[0].target = wrong
    lying[0].blocks[2].successors[0].target = wrong
    liar = await backend.agent(f"liar-{unique}", kernel_tag=tag, modules=[("vmlinux", 0xFFFFFFFF81000000, lying)])
    await liar.connect(send_catalog=False)
    name, _base, fns, digest = liar.modules[0]
    honest = await backend.agent(
        f"truth-{unique}", kernel_tag=tag, modules=[("vmlinux", 0xFFFFFFFF81000000, honest_fns)]
    )
    assert honest.modules[0][3] == digest, "the lie is outside the digest"
    await _chunks(liar, digest, name, [(0, True, fns)])
    # The backend ends the stream as soon as the last chunk is checked (20 s: far beyond a 30-function store).
    error = await asyncio.wait_for(_ended(liar), 20)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "__x64_sys_read" in error.details() or "ksys_read" in error.details(), error.details()
    assert await backend.scalar("SELECT count(*) FROM catalog_pieces WHERE digest = :d", d=digest) == 0
    assert (
        await backend.scalar(
            "SELECT count(*) FROM audit_log WHERE action = 'catalog_rejected' AND target = :h", h=f"liar-{unique}"
        )
        == 1
    )
    await liar.close()

    await honest.connect()
    await wait_catalog_complete(client, f"truth-{unique}")
    found = (await client.get(f"/api/v1/hosts/truth-{unique}/functions", params={"q": "vfs_read"})).json()
    fid = next(i["id"] for i in found["items"] if i["name"] == "vfs_read")
    d = (await client.get(f"/api/v1/hosts/truth-{unique}/functions/{fid}")).json()
    assert d["blocks"][2]["successors"][0]["target_name"] == "ksys_read"
    assert d["blocks"][2]["successors"][0]["target_address"] == 0xFFFFFFFF81000000 + honest_fns[1].offset
    assert [(c["name"], c["target_address"]) for c in d["callees"]] == [
        ("__x64_sys_read", 0xFFFFFFFF81000000 + honest_fns[2].offset)
    ]
    await honest.close()


async def test_fields_outside_the_digest_are_not_stored_from_the_uploader(backend, client, unique):
    """A call into another module keeps no address (that module's placement is the sending host's, and the
    digest does not cover it): it is resolved by name, and shown without an address when no module of the
    host has the name. An undecodable_offset of a decodable function is not stored either."""
    fns = kernel_functions(10)
    fns[3].calls.add(
        site_offset=0x4, target=0xFFFFFFFF81000000 + fns[5].offset, target_name="ext_only_fn", target_module="othermod"
    )
    fns[4].undecodable_offset = 0x7  # undecodable is false: the digest ignores it
    host_id = f"ext-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"ext-{unique}", modules=[("vmlinux", 0xFFFFFFFF81000000, fns)])
    await agent.connect()
    await wait_catalog_complete(client, host_id)
    digest = agent.modules[0][3]
    assert (
        await backend.scalar("SELECT undecodable_offset FROM functions WHERE digest = :d AND index = 4", d=digest) == 0
    )
    found = (await client.get(f"/api/v1/hosts/{host_id}/functions", params={"q": fns[3].name})).json()
    fid = next(i["id"] for i in found["items"] if i["name"] == fns[3].name)
    d = (await client.get(f"/api/v1/hosts/{host_id}/functions/{fid}")).json()
    assert d["callees"] == [
        {
            "site_offset": 4,
            "target_address": None,
            "target_address_hex": None,
            "name": "ext_only_fn",
            "module": "othermod",
            "function_id": None,
        }
    ]
    await agent.close()


@pytest.mark.parametrize(
    "breakage, reason",
    [
        (lambda f: setattr(f.blocks[1], "offset", 0x18), "do not tile"),
        (lambda f: setattr(f.blocks[2], "size", f.blocks[2].size + 0x100), "blocks cover"),
        (lambda f: setattr(f.blocks[0].successors[1], "target", 0x22), "not a block start"),
        (lambda f: setattr(f, "name", "bad\x00name"), "NUL or control character"),
        (lambda f: setattr(f, "size", 1 << 31), "out of range"),
        (lambda f: setattr(f.blocks[0], "size", 0), "empty block"),
        (lambda f: setattr(f.blocks[0].successors[0], "kind", 9), "unknown successor kind"),
        (lambda f: f.calls.add(site_offset=0xFFFFFFFF), "outside the function"),
    ],
)
async def test_a_function_breaking_the_model_ends_the_stream(backend, unique, breakage, reason):
    fns = kernel_functions(10)
    agent = await backend.agent(
        f"bad-{unique}", kernel_tag=f"bad-{unique}-{reason}", modules=[("vmlinux", 0xFFFFFFFF81000000, fns)]
    )
    await agent.connect(send_catalog=False)
    name, _base, sent, digest = agent.modules[0]
    broken = [pb.Function() for _ in sent]
    for f, real in zip(broken, sent, strict=True):
        f.CopyFrom(real)
    breakage(broken[7])
    await _chunks(agent, digest, name, [(0, True, broken)])
    error = await _ended(agent)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in error.details() and "function 7" in error.details()
    assert await backend.scalar("SELECT count(*) FROM catalog_pieces WHERE digest = :d", d=digest) == 0
    await agent.close()


async def test_duplicate_function_indexes_end_the_stream(backend, unique):
    agent = await backend.agent(
        f"dupidx-{unique}",
        kernel_tag=f"dupidx-{unique}",
        modules=[("vmlinux", 0xFFFFFFFF81000000, kernel_functions(10))],
    )
    await agent.connect(send_catalog=False)
    name, _base, fns, digest = agent.modules[0]
    twice = [pb.Function() for _ in fns]
    for f, real in zip(twice, fns, strict=True):
        f.CopyFrom(real)
    twice[5].index = 4
    await _chunks(agent, digest, name, [(0, True, twice)])
    error = await _ended(agent)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "function index 4 where 5 was due" in error.details()
    await agent.close()


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda h: setattr(h, "hostname", "x" * 1_000_000), "Hello.hostname is 1000000 characters"),
        (lambda h: setattr(h, "hostname", "host\x00name"), "NUL or control character"),
        (
            lambda h: h.modules.extend(pb.ModuleRef(name=f"m{i}", digest="ab" * 32) for i in range(20_000)),
            "modules (at most 4096)",
        ),
        (lambda h: setattr(h.modules[0], "function_count", 1 << 31), "more functions or blocks than allowed"),
        (lambda h: h.installs.add(plan_id="../../etc", state="installed", pid=1), "InstalledPlan.plan_id must be"),
        (lambda h: h.installs.add(plan_id="p1", state="owned", pid=1), "install p1: unknown state"),
        (
            lambda h: h.installs.add(plan_id="p1", state="installed", pid=1, code_sha256="XY" * 32),
            "code_sha256 is not 64 lowercase hex",
        ),
        (lambda h: h.installs.add(plan_id="p1", state="installed", pid=0), "install p1: pid 0 is out of range"),
        (
            lambda h: [h.installs.add(plan_id="p1", state="installed", pid=1) for _ in range(2)],
            "install p1 is listed twice",
        ),
        (
            lambda h: [h.installs.add(plan_id=f"p{i}", state="installed", pid=1) for i in range(1025)],
            "installs (at most 1024)",
        ),
    ],
)
async def test_a_malformed_hello_ends_the_stream_before_anything_is_stored(backend, unique, edit, reason):
    host_id = f"hello-{unique}"
    error = await _hello_only(backend, host_id, edit)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in error.details()
    assert len(error.details()) < 300, "the reason must not echo the input"
    assert await backend.scalar("SELECT count(*) FROM host_modules WHERE host_id = :h", h=host_id) == 0


async def test_bytes_that_are_not_a_message_end_the_stream_with_invalid_argument(backend, unique):
    """A string field holding invalid UTF-8 (the NUL strings and raw bytes of the issue) does not
    decode; the stream ends with INVALID_ARGUMENT, not UNKNOWN."""
    agent = await backend.agent(f"raw-{unique}")
    creds = agent.credentials
    channel = grpc.aio.secure_channel(
        backend.grpc_target, grpc.ssl_channel_credentials(creds.ca_pem, creds.key_pem, creds.cert_pem)
    )
    call = channel.stream_stream(
        "/hotpath.v1.AgentService/Connect",
        request_serializer=lambda b: b,
        response_deserializer=pb.ServerMessage.FromString,
    )()
    # AgentMessage{hello: Hello{host_id: b"\xff\xfe"}}: field 1 (hello), field 1 (host_id) with bad UTF-8.
    await call.write(bytes([0x0A, 0x04, 0x0A, 0x02, 0xFF, 0xFE]))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not decode" in err.value.details()
    await channel.close()


@pytest.mark.parametrize(
    "blocks, total, reason",
    [
        ([("vmlinux", 0, 0, 1 << 63)], 1 << 40, "BlockSamples.count"),
        ([("vmlinux", 1 << 31, 0, 1)], None, "out of range"),
        ([("vmlinux", 0, 0xFFFFFFFF, 1)], None, "out of range"),
        ([("vmlinux", 0, 0x1000, 1)], None, "bytes long"),
        ([("vmlinux", 49, 0, 1), ("vmlinux", 0, 0, 5)], 2, "exceed total_samples"),
        ([("nosuchmodule", 0, 0, 1)], None, "Hello did not list"),
        ([("vmlinux", 50, 0, 1)], None, "which has 50"),
    ],
)
async def test_a_malformed_batch_ends_the_stream_and_stores_nothing(backend, client, unique, blocks, total, reason):
    host_id = f"batch-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"batch-{unique}")
    await agent.connect()

    await wait_catalog_complete(client, host_id)
    await agent.send_metrics(time.time_ns() - 2 * 10**9, blocks, total=total)
    error = await _ended(agent)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in error.details()
    assert "SELECT" not in error.details() and "INSERT" not in error.details()
    assert await backend.scalar("SELECT count(*) FROM sample_intervals WHERE host_id = :h", h=host_id) == 0
    await agent.close()


async def test_a_message_over_the_size_limit_ends_the_stream(backend, unique):
    """One stream cannot make the backend hold an arbitrarily large message (the limit follows the plan
    size limit: 17 MiB by default)."""
    from app.core.config import Settings

    # docs/security.md: 17 MiB per message (the 16 MiB plan limit plus 1 MiB), never below 8 MiB.
    assert backend.runtime.settings.grpc_max_message_bytes == 17 << 20
    assert Settings(max_plan_bytes=64 * 1024).grpc_max_message_bytes == 8 << 20
    agent = await backend.agent(f"big-msg-{unique}", kernel_tag=f"bigmsg-{unique}")
    await agent.connect(send_catalog=False)
    name, _base, fns, digest = agent.modules[0]
    huge = pb.Function()
    huge.CopyFrom(fns[0])
    huge.name = "n" * (backend.runtime.settings.grpc_max_message_bytes + (1 << 20))
    await agent.write(
        pb.AgentMessage(catalog_chunk=pb.CatalogChunk(digest=digest, module=name, seq=0, last=True, functions=[huge]))
    )
    error = await _ended(agent)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await agent.close()


STACK = [("k", 0, 0x4), ("k", 1, 0x18), ("u", "/usr/bin/dd", 0x1234)]


def _forge_id(b):
    b.stacks.stacks[0].id ^= 1
    b.stacks.counts[0].stack_id ^= 1


def _frame_module(b):
    b.stacks.stacks[0].frames[0].module = 99


def _sum(b):
    b.stacks.stack_samples += 1


def _comm(b):
    b.stacks.comms[0] = "d\x01d"


def _cpu(b):
    b.stacks.counts[0].cpu = 1 << 20


def _rehash(b):
    """Give the edited first stack the id its frames hash to, so the check under test is the one that fails."""
    from app.protocol.stack_defs import stack_id

    s = b.stacks.stacks[0]
    mods = b.stacks.modules
    s.id = stack_id(
        [
            (1, mods[f.module].digest, f.function_index, f.offset)
            if mods[f.module].kind == 1
            else (3, mods[f.module].name, 0, f.offset)
            for f in s.frames
        ]
    )
    b.stacks.counts[0].stack_id = s.id


def _function_beyond_catalog(b):
    b.stacks.stacks[0].frames[0].function_index = 500  # of a 50-function piece
    _rehash(b)


def _offset_beyond_function(b):
    b.stacks.stacks[0].frames[0].offset = 0x1000
    _rehash(b)


def _unknown_digest(b):
    b.stacks.modules[0].digest = "ab" * 32
    _rehash(b)


def _instructions(b):
    b.blocks[0].instruction_counts[0] += 1


def _idle(b):
    b.idle_samples = b.total_samples + 1


@pytest.mark.parametrize(
    "edit, reason",
    [
        (_forge_id, "hash to another id"),
        (_frame_module, "not in StackSamples.modules"),
        (_sum, "do not sum to stack_samples"),
        (_comm, "control character"),
        (_cpu, "out of range"),
        (_function_beyond_catalog, "which has 50"),
        (_offset_beyond_function, "bytes long"),
        (_unknown_digest, "does not run and no host has sent"),
        (_instructions, "sum to count"),
        (_idle, "idle_samples exceeds"),
    ],
)
async def test_a_malformed_stack_batch_ends_the_stream_and_stores_nothing(backend, client, unique, edit, reason):
    host_id = f"stk-bad-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"stk-bad-{unique}")
    await agent.connect()

    await wait_catalog_complete(client, host_id)
    batch = agent.stack_batch(time.time_ns() - 2 * 10**9, [(STACK, 42, "dd", 0, 3)])
    edit(batch)
    await agent.send_batch(batch)
    error = await _ended(agent)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in error.details()
    for table in ("sample_intervals", "stack_samples", "stack_defs"):
        assert await backend.scalar(f"SELECT count(*) FROM {table} WHERE host_id = :h", h=host_id) == 0
    await agent.close()


async def test_samples_of_a_stack_never_defined_are_counted_as_dropped_not_stored(backend, client, unique):
    host_id = f"stk-undef-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"stk-undef-{unique}")
    await agent.connect()

    await wait_catalog_complete(client, host_id)
    t = time.time_ns() - 5 * 10**9
    seq = await agent.send_batch(
        agent.stack_batch(t, [(STACK, 42, "dd", 0, 3), (STACK[1:], 42, "dd", 0, 2)], define=set())
    )

    async def acked():
        return any(a.seq >= seq for a in agent.acks)

    await wait_until(acked)
    assert await backend.scalar("SELECT count(*) FROM stack_samples WHERE host_id = :h", h=host_id) == 0
    assert await backend.scalar("SELECT stack_dropped_samples FROM sample_intervals WHERE host_id = :h", h=host_id) == 5
    # Once defined, the same id is stored, and later batches may refer to it without its frames.
    seq = await agent.send_batch(agent.stack_batch(t + 10**9, [(STACK, 42, "dd", 0, 3)]))
    seq = await agent.send_batch(agent.stack_batch(t + 2 * 10**9, [(STACK, 42, "dd", 1, 4)], define=set()))
    await wait_until(acked)
    assert await backend.scalar("SELECT sum(count) FROM stack_samples WHERE host_id = :h", h=host_id) == 7
    await agent.close()


async def test_a_batch_s_stacks_are_checked_while_the_event_loop_goes_on_serving(backend, client, unique, monkeypatch):
    """Checking a batch's stacks (every frame, every id rehashed) is ingest's heaviest step: it runs beside
    the event loop, not on it, so the API and the other streams are served meanwhile (under a read loop's
    kernel stacks it held the loop for seconds, and an "Optimize…" click waited behind it)."""
    host_id = f"stk-loop-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"stk-loop-{unique}")
    await agent.connect()
    await wait_catalog_complete(client, host_id)
    loop = asyncio.get_running_loop()
    served: list[bool] = []
    check = agent_input.check_stacks

    def checking(stacks, total_samples):
        # A callback for the loop, waited for here: on the loop's own thread it could not run before this
        # check returns, and the wait would end unserved after its bound.
        ran = threading.Event()
        loop.call_soon_threadsafe(ran.set)
        served.append(ran.wait(30))
        return check(stacks, total_samples)

    monkeypatch.setattr(agent_input, "check_stacks", checking)
    seq = await agent.send_batch(agent.stack_batch(time.time_ns() - 2 * 10**9, [(STACK, 42, "dd", 0, 3)]))
    await wait_for_ack(agent, seq, timeout=60)
    assert served == [True], "the event loop ran nothing while the batch's stacks were checked"
    assert await backend.scalar("SELECT sum(count) FROM stack_samples WHERE host_id = :h", h=host_id) == 3
    await agent.close()
