# SPDX-License-Identifier: Apache-2.0
"""Several database nodes (app.storage.nodes, issue 19): the backend's storage and ingest writer against two
real Postgres clusters started here (Debian's postgresql-15: the embedded Postgres has no postgres_fdw), the
coordinator A and one node B, hosts placed on both by the hash of their id.

- A batch commits on its host's database only, with its delivery mark; the fleet's hot code, read through
  the coordinator, equals the sums of the raw rows both databases hold.
- B stopped: a batch of a B host fails and is not acknowledged, A's hosts keep being stored, the fleet view
  fails naming B. B restarted (fast) and killed (-9) while agents send: every acknowledged batch is stored
  exactly once afterwards, a resend after a failure included (the agents resend from the node's mark).
"""

import asyncio
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.db import downgrade_database, make_engine, make_sessionmaker, upgrade_database
from app.storage import fleet, nodes
from app.storage.ingest import IngestWriter, Item, SampleRow
from app.storage.samples import TimeRange
from app.storage.series import partitions, rollups
from tests.backend_process import Backend
from tests.conftest import make_user, token_for
from tests.scripted_agent import wait_catalog_complete, wait_for_ack, wait_until

PG_MAJOR = "15"
HANG_S = 120.0  # a hang bound, not a timing expectation


def _bindir() -> Path:
    """Postgres 15's programs with postgres_fdw beside them: $HOTPATH_NODES_PG_BINDIR, else Debian's
    postgresql-15 (scripts/install-deps.sh test installs it). Missing, the test fails: it is not skipped."""
    given = os.environ.get("HOTPATH_NODES_PG_BINDIR")
    candidates = [Path(given)] if given else [Path(f"/usr/lib/postgresql/{PG_MAJOR}/bin")]
    for bindir in candidates:
        if (bindir / "initdb").exists():
            pkglib = subprocess.run(
                [str(bindir / "pg_config"), "--pkglibdir"], capture_output=True, text=True, check=True
            ).stdout.strip()
            if (Path(pkglib) / "postgres_fdw.so").exists():
                return bindir
    pytest.fail(
        f"no Postgres {PG_MAJOR} with postgres_fdw in {', '.join(map(str, candidates))}: install postgresql-{PG_MAJOR} "
        "(scripts/install-deps.sh test) or set HOTPATH_NODES_PG_BINDIR"
    )


@dataclass
class Cluster:
    bindir: Path
    root: Path  # data folder and socket directory
    user: str | None  # the system user Postgres runs as (initdb refuses root)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@/postgres?host={self.root}&port=5432"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=HANG_S)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def start(self) -> None:
        opts = f"-k {self.root} -c listen_addresses='' -p 5432 -c fsync=on"
        started = self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-o",
            opts,
            "-w",
            "-t",
            "120",
            "start",
            check=False,
        )
        if started.returncode != 0:
            log = (self.root / "log").read_text()[-2000:] if (self.root / "log").exists() else ""
            raise AssertionError(f"{self.root.name} did not start: {started.stdout}{started.stderr}\n{log}")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "120", "stop", check=False)

    def _pids(self) -> list[int]:
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout.split()
        return [pid, *map(int, children)]

    def pause(self) -> None:
        """The postmaster and its backends stopped with SIGSTOP: a server that hangs on its established
        connections (and takes new ones into the socket's backlog without answering)."""
        for pid in self._pids():
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self._pids():
            os.kill(pid, signal.SIGCONT)

    def kill9(self) -> None:
        """The postmaster killed with SIGKILL (its backends end when they notice, as after a crash)."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout.split()
        os.kill(pid, signal.SIGKILL)
        # Its children leave the shared memory when they notice; a new postmaster refuses to start before.
        for _ in range(int(HANG_S / 0.2)):
            if not any(Path(f"/proc/{c}").exists() for c in children):
                break
            time.sleep(0.2)


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[Cluster, Cluster]]:
    bindir = _bindir()
    user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail("running as root, Postgres needs the system user 'postgres' (created by postgresql-15)")
        user = "postgres"
    top = Path(tempfile.mkdtemp(prefix="hp-nodes-"))
    made: list[Cluster] = []
    try:
        for name in ("a", "b"):
            c = Cluster(bindir, top / name, user)
            c.root.mkdir()
            if user is not None:
                shutil.chown(top, user)
                shutil.chown(c.root, user)
            c.init()
            c.start()
            made.append(c)
        yield made[0], made[1]
    finally:
        for c in made:
            c.stop("immediate")
        shutil.rmtree(top, ignore_errors=True)


@dataclass
class Spread:
    a: Cluster
    b: Cluster
    engine: AsyncEngine
    spread: nodes.Nodes
    writer: IngestWriter
    on_a: list[str]
    on_b: list[str]


FUNCS = 12
STEP = timedelta(milliseconds=50)  # between a host's batches' times (any distinct times do)
DIGEST = "d" * 64


@pytest.fixture(scope="module")
async def spread(clusters) -> Spread:
    a, b = clusters
    upgrade_database(a.url)
    nodes.setup(a.url, [b.url])
    nodes.setup(a.url, [b.url])  # idempotent (every start-up runs it)
    engine = make_engine(a.url)
    spread = nodes.Nodes(engine, [b.url])
    nodes.configure(spread)
    writer = IngestWriter(engine, nodes=spread)
    writer.start()
    try:
        hosts = [f"node-host-{i:02d}" for i in range(10)]
        placed = await spread.place(hosts)
        on_a = [h for h in hosts if placed[h] == 0]
        on_b = [h for h in hosts if placed[h] == 1]
        assert len(on_a) >= 2 and len(on_b) >= 2, placed
        now = datetime.now(UTC)
        for e in (engine, spread.node(1).engine):
            await partitions.ensure(e, now, timedelta(hours=6), timedelta(days=2))
        async with engine.begin() as conn:
            await conn.execute(
                text("""
                INSERT INTO hosts (id, hostname, kernel_release, kernel_build_id, cpu_model, cpu_count, capabilities,
                    agent_version, metric_interval_ms, sample_frequency_hz, sample_event, parse_seconds, online,
                    connected_at, status, refused_batches, labels, agent_labels)
                SELECT h, h, '6.1.0-nodes', 'b1', '', 2, '[]', '', 1000, 99, '', 0, true, now(), 'active', 0, '{}', '{}'
                FROM unnest(CAST(:h AS text[])) h"""),
                {"h": hosts},
            )
            await conn.execute(
                text("""
                INSERT INTO catalog_pieces (digest, module, function_count, block_count, complete)
                VALUES (:d, 'vmlinux', :n, :n, true)"""),
                {"d": DIGEST, "n": FUNCS},
            )
            await conn.execute(
                text("""
                INSERT INTO functions (id, digest, index, name, "offset", size, block_count, undecodable,
                    undecodable_offset)
                SELECT 9000 + k, :d, k, 'nodes_fn_' || k, k * 64, 64, 1, false, 0 FROM generate_series(0, :n - 1) k"""),
                {"d": DIGEST, "n": FUNCS},
            )
        yield Spread(a, b, engine, spread, writer, on_a, on_b)
    finally:
        await writer.stop()
        nodes.configure(None)
        await spread.dispose()
        await engine.dispose()


def _row(host_id: str, ts: datetime, seq: int) -> SampleRow:
    """One interval whose counts follow from (host, seq): function 9000 + seq % FUNCS gets seq % 7 + 1."""
    k = seq % FUNCS
    fids = [9000 + k, 9000 + (k + 1) % FUNCS]
    counts = [seq % 7 + 1, 2]
    return SampleRow(
        host_id=host_id,
        ts=ts,
        interval_ms=1000,
        totals=(sum(counts) + 1, 0, 0, 0, 0, 0),
        function_ids=fids,
        block_offsets=[0, 0],
        counts=counts,
    )


class Agent:
    """What an agent and its stream do with the delivery marks: numbered batches, resent from the node's
    mark after a failure (as app.agents.data reads it, through the coordinator's spread table)."""

    def __init__(self, s: Spread, host_id: str, base: datetime) -> None:
        self.s, self.host_id, self.base = s, host_id, base
        self.instance = f"inst-{host_id}"
        self.next = 1
        self.acked: set[int] = set()
        self.failures = 0

    def ts(self, seq: int) -> datetime:
        return self.base + seq * STEP

    def item(self, seq: int) -> Item:
        return Item(
            host_id=self.host_id,
            samples=_row(self.host_id, self.ts(seq), seq),
            mark=(self.instance, seq),
        )

    async def mark(self) -> int:
        async with self.s.engine.connect() as conn:
            found = await conn.execute(
                text(f"SELECT seq FROM {nodes.table('delivery_marks')} WHERE host_id = :h AND instance_id = :i"),
                {"h": self.host_id, "i": self.instance},
            )
            return int(found.scalar_one_or_none() or 0)

    async def send(self, seq: int) -> bool:
        """One batch; True once acknowledged (stored, or found below the mark on a resend)."""
        try:
            await self.s.writer.write(self.item(seq))
        except Exception:  # noqa: BLE001 - not acknowledged: the agent keeps it and resends
            self.failures += 1
            return False
        self.acked.add(seq)
        return True

    async def run(self, stop: asyncio.Event, pause_s: float = 0.02) -> None:
        pending: list[int] = []
        while not stop.is_set() or pending:
            if not pending:
                pending.append(self.next)
                self.next += 1
            seq = pending[0]
            if await self.send(seq):
                pending.pop(0)
            else:
                # Reconnect: the stream reads the mark, and what is below it counts as acknowledged.
                await asyncio.sleep(0.2)
                try:
                    mark = await self.mark()
                except Exception:  # noqa: BLE001 - the node is still down: try again
                    continue
                for s in [p for p in pending if p <= mark]:
                    self.acked.add(s)
                    pending.remove(s)
                if stop.is_set() and pending and self.failures > 2000:
                    raise AssertionError(f"{self.host_id}: batches never stored")
            await asyncio.sleep(pause_s)


async def _raw(
    engine: AsyncEngine, hosts: list[str], lo: datetime, hi: datetime
) -> tuple[dict[int, int], dict[str, int]]:
    """Per function and per host busy samples of the raw rows one database holds."""
    async with engine.connect() as conn:
        per_fn = dict(
            (
                await conn.execute(
                    text("""
                SELECT u.f, sum(u.c) FROM sample_intervals s, unnest(s.function_ids, s.counts) AS u(f, c)
                WHERE s.host_id = ANY(:h) AND s.ts >= :lo AND s.ts < :hi GROUP BY 1"""),
                    {"h": hosts, "lo": lo, "hi": hi},
                )
            ).all()
        )
        per_host = dict(
            (
                await conn.execute(
                    text("""
                SELECT host_id, sum(total_samples - idle_samples) FROM sample_intervals
                WHERE host_id = ANY(:h) AND ts >= :lo AND ts < :hi GROUP BY 1"""),
                    {"h": hosts, "lo": lo, "hi": hi},
                )
            ).all()
        )
    return {int(k): int(v) for k, v in per_fn.items()}, {k: int(v) for k, v in per_host.items()}


async def _fleet(s: Spread, lo: datetime, hi: datetime) -> dict[str, Any]:
    async with make_sessionmaker(s.engine)() as session:
        group = (await fleet.groups(session, {}, 10, 0, "hosts", True))["items"][0]
        return await fleet.hot_code(session, group, {}, TimeRange(lo, hi), 0.01, 500, 0, "samples", True)


async def _roll_up(s: Spread) -> None:
    for e in (s.engine, s.spread.node(1).engine):
        await rollups.run_once(e, lag_s=0)


async def _check_fleet_equals_both_nodes(s: Spread, lo: datetime) -> None:
    await _roll_up(s)
    async with s.engine.connect() as conn:
        await nodes.read_across(conn)
        wm_1m, _wm_1h = await rollups.watermarks(conn)
    assert wm_1m > lo
    got = await _fleet(s, lo, wm_1m)
    fa, ha = await _raw(s.engine, s.on_a + s.on_b, lo, wm_1m)
    fb, hb = await _raw(s.spread.node(1).engine, s.on_a + s.on_b, lo, wm_1m)
    assert fa and fb, "both databases hold rows"
    assert not set(ha) & set(s.on_b) and not set(hb) & set(s.on_a), "each host's rows on its own database only"
    want = {f: fa.get(f, 0) + fb.get(f, 0) for f in set(fa) | set(fb)}
    assert {i["function_id"]: i["samples"] for i in got["items"]} == want
    assert {h["id"]: h["busy_samples"] for h in got["hosts"] if h["busy_samples"]} == {**ha, **hb}


async def test_batches_commit_on_their_hosts_node_and_the_fleet_reads_both(spread: Spread) -> None:
    s = spread
    base = (datetime.now(UTC) - timedelta(minutes=20)).replace(second=0, microsecond=0)
    agents = [Agent(s, h, base) for h in s.on_a + s.on_b]
    for agent in agents:
        for _ in range(30):
            assert await agent.send(agent.next)
            agent.next += 1
    # Each host's rows and delivery mark are on its own database only.
    for e, mine, other in ((s.engine, s.on_a, s.on_b), (s.spread.node(1).engine, s.on_b, s.on_a)):
        async with e.connect() as conn:
            marks = dict((await conn.execute(text("SELECT host_id, seq FROM delivery_marks"))).all())
            rows = dict((await conn.execute(text("SELECT host_id, count(*) FROM sample_intervals GROUP BY 1"))).all())
        assert {h: marks.get(h) for h in mine} == dict.fromkeys(mine, 30)
        assert {h: rows.get(h) for h in mine} == dict.fromkeys(mine, 30)
        assert not set(marks) & set(other) and not set(rows) & set(other)
    # The coordinator's spread tables read both databases.
    async with s.engine.connect() as conn:
        total = (await conn.execute(text(f"SELECT count(*) FROM {nodes.table('sample_intervals')}"))).scalar_one()
        local = (await conn.execute(text("SELECT count(*) FROM sample_intervals"))).scalar_one()
    assert (total, local) == (30 * len(agents), 30 * len(s.on_a))
    # Rows below the watermarks (late) are added to the rollups on their node in the batch's transaction.
    await _roll_up(s)
    for agent in agents:
        assert await agent.send(agent.next)
        agent.next += 1
    await _check_fleet_equals_both_nodes(s, base)


async def test_a_node_down_fails_its_hosts_only_and_the_fleet_names_it(spread: Spread) -> None:
    s = spread
    base = (datetime.now(UTC) - timedelta(minutes=40)).replace(second=0, microsecond=0)
    host_a, host_b = Agent(s, s.on_a[0], base), Agent(s, s.on_b[0], base)
    host_a.instance = host_b.instance = "down-test"
    s.b.stop("fast")
    try:
        assert not await host_b.send(1), "a batch of a host on the stopped node is not acknowledged"
        assert await host_a.send(1), "the coordinator's hosts are still stored"
        with pytest.raises(nodes.NodeUnavailable) as err:
            await _fleet(s, base, datetime.now(UTC))
        assert "node 1 (" in str(err.value) and str(s.b.root) in str(err.value)
        assert "password" not in str(err.value)
    finally:
        s.b.start()
    assert await host_b.send(1)
    assert await host_b.mark() == 1 and await host_a.mark() == 1
    async with s.spread.node(1).engine.connect() as conn:
        n = (
            await conn.execute(
                text("SELECT count(*) FROM sample_intervals WHERE host_id = :h AND ts = :t"),
                {"h": host_b.host_id, "t": host_b.ts(1)},
            )
        ).scalar_one()
    assert n == 1


async def test_a_node_restarted_and_killed_while_agents_send_loses_nothing_acknowledged(spread: Spread) -> None:
    s = spread
    base = (datetime.now(UTC) - timedelta(minutes=55)).replace(second=0, microsecond=0)
    agents = [Agent(s, h, base) for h in s.on_a + s.on_b]
    for agent in agents:
        agent.instance = "restart-test"
    stop = asyncio.Event()
    tasks = [asyncio.create_task(a.run(stop)) for a in agents]

    async def acked_more(n: int) -> None:
        await acked_more_for(agents, s.on_a + s.on_b, n)

    try:
        await acked_more(5)
        await asyncio.to_thread(s.b.stop, "fast")
        before = {a.host_id: len(a.acked) for a in agents}
        # While B is down, A's hosts go on being acknowledged; B's are not (but for the one batch each had
        # in flight when B stopped: an agent sends one at a time).
        await acked_more_for(agents, s.on_a, 20)
        assert all(len(a.acked) <= before[a.host_id] + 1 for a in agents if a.host_id in s.on_b)
        await asyncio.to_thread(s.b.start)
        await acked_more(5)
        await asyncio.to_thread(s.b.kill9)
        await acked_more_for(agents, s.on_a, 5)
        await asyncio.to_thread(s.b.start)  # crash recovery
        await acked_more(5)
    finally:
        stop.set()
        async with asyncio.timeout(HANG_S):
            await asyncio.gather(*tasks)
    assert any(a.failures for a in agents if a.host_id in s.on_b), "B's hosts saw the restart"
    assert not any(a.failures for a in agents if a.host_id in s.on_a), "A's hosts never did"
    await _check_stored_once(s, agents, base)


async def _check_stored_once(s: Spread, agents: list["Agent"], base: datetime) -> None:
    """Every acknowledged batch stored exactly once on its host's database, nothing never acknowledged."""
    for engine, hosts in ((s.engine, s.on_a), (s.spread.node(1).engine, s.on_b)):
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    text("""
                    SELECT host_id, ts, count(*) FROM sample_intervals
                    WHERE host_id = ANY(:h) AND ts >= :lo AND ts < :hi GROUP BY 1, 2"""),
                    {"h": hosts, "lo": base, "hi": base + timedelta(minutes=14)},
                )
            ).all()
        stored: dict[str, dict[int, int]] = {}
        for h, ts, n in rows:
            stored.setdefault(h, {})[round((ts - base) / STEP)] = n
        for agent in (a for a in agents if a.host_id in hosts):
            got = stored.get(agent.host_id, {})
            assert {k: n for k, n in got.items() if n != 1} == {}, f"{agent.host_id}: stored twice"
            assert agent.acked <= set(got), f"{agent.host_id}: acknowledged but lost {sorted(agent.acked - set(got))}"
            assert set(got) == agent.acked, f"{agent.host_id}: stored but never acknowledged"
    await _check_fleet_equals_both_nodes(s, base)


async def test_a_node_that_hangs_holds_its_own_hosts_only(spread: Spread) -> None:
    """B stopped with SIGSTOP while agents send: its connections stay open and nothing answers. A's hosts go
    on being acknowledged while B's commit waits (each database commits in a lane of its own); with the
    writer's bound for a node, B's commits fail instead of waiting; after SIGCONT every acknowledged batch
    is stored once."""
    s = spread
    base = (datetime.now(UTC) - timedelta(minutes=75)).replace(second=0, microsecond=0)
    agents = [Agent(s, h, base) for h in s.on_a + s.on_b]
    for agent in agents:
        agent.instance = "hang-test"
    bound = s.writer.node_timeout_s
    stop = asyncio.Event()
    tasks = [asyncio.create_task(a.run(stop)) for a in agents]

    async def b_failed() -> bool:
        return any(a.failures for a in agents if a.host_id in s.on_b)

    try:
        await acked_more_for(agents, s.on_a + s.on_b, 3)
        # A bound longer than this phase waits: B's commit is still waiting when A's hosts have 30 more
        # acknowledged. With one writer for every database A's waited for B's commit first.
        s.writer.node_timeout_s = 4 * HANG_S
        s.b.pause()
        try:
            await acked_more_for(agents, s.on_a, 30)
            assert not await b_failed(), "B's commit was still waiting"
        finally:
            # A short bound for every commit from now on (set before B answers again: a commit started
            # under the long bound would hang through the next pause).
            s.writer.node_timeout_s = 2.0
            s.b.resume()
        await acked_more_for(agents, s.on_a + s.on_b, 3)
        # With the short bound B's commits fail (their agents keep the batches and resend) rather than wait.
        s.b.pause()
        try:
            await wait_until(b_failed, HANG_S)
        finally:
            s.b.resume()
        await acked_more_for(agents, s.on_a + s.on_b, 5)
    finally:
        s.writer.node_timeout_s = bound
        stop.set()
        async with asyncio.timeout(HANG_S):
            await asyncio.gather(*tasks)
    assert not any(a.failures for a in agents if a.host_id in s.on_a), "A's hosts never failed"
    await _check_stored_once(s, agents, base)


async def acked_more_for(agents: list[Agent], hosts: list[str], n: int) -> None:
    """Until each of the hosts' agents has n more batches acknowledged."""
    chosen = [a for a in agents if a.host_id in hosts]
    target = [len(a.acked) + n for a in chosen]

    async def done() -> bool:
        return all(len(a.acked) >= t for a, t in zip(chosen, target, strict=True))

    await wait_until(done, HANG_S)


async def test_a_commit_left_ambiguous_is_not_stored_twice_on_resend(spread: Spread) -> None:
    """A B host's batch whose rows and mark B committed, but whose part on the coordinator (the host's
    presence) failed after: not acknowledged, and its resend is recognised by B's mark, so stored once."""
    s = spread
    base = (datetime.now(UTC) - timedelta(minutes=50)).replace(second=0, microsecond=0)
    agent = Agent(s, s.on_b[1], base)
    agent.instance = "ambiguous-test"
    async with s.engine.begin() as conn:
        await conn.execute(
            text("""
            CREATE FUNCTION nodes_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'refused by the test'; END $$"""),
        )
        await conn.execute(
            text(f"""
            CREATE TRIGGER nodes_test_refuse BEFORE UPDATE ON hosts FOR EACH ROW
            WHEN (NEW.id = '{agent.host_id}') EXECUTE FUNCTION nodes_test_refuse()""")
        )
    try:
        assert not await agent.send(1), "the coordinator's part failed: not acknowledged"
    finally:
        async with s.engine.begin() as conn:
            await conn.execute(text("DROP TRIGGER nodes_test_refuse ON hosts"))
            await conn.execute(text("DROP FUNCTION nodes_test_refuse()"))
    assert await agent.mark() == 1, "B committed the batch with its mark"
    # The agent reconnects and resends from the mark: batch 1 counts as stored, batch 2 is sent.
    assert agent.acked == set()
    for seq in (1, 2):
        if seq > await agent.mark():
            assert await agent.send(seq)
    async with s.spread.node(1).engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT ts, count(*) FROM sample_intervals WHERE host_id = :h AND ts >= :lo GROUP BY 1 ORDER BY 1"
                ),
                {"h": agent.host_id, "lo": base},
            )
        ).all()
    assert [(r[0], r[1]) for r in rows if r[0] < base + timedelta(minutes=1)] == [(agent.ts(1), 1), (agent.ts(2), 1)]


async def _databases(clusters: tuple[Cluster, Cluster], db: str) -> tuple[str, str]:
    """A new database db on each of the two clusters: its URL on each (the coordinator's, the node's)."""
    for c in clusters:
        engine = make_engine(c.url).execution_options(isolation_level="AUTOCOMMIT")
        async with engine.connect() as conn:
            await conn.execute(text(f"CREATE DATABASE {db}"))
        await engine.dispose()
    a, b = (c.url.replace("/postgres?", f"/{db}?") for c in clusters)
    return a, b


async def test_the_backend_started_with_a_node_serves_the_fleet_across_both(clusters, data_folder) -> None:
    """`python -m app` with DATABASE_URL on A and HOTPATH_DB_NODES naming B: scripted agents' batches stored
    on their hosts' databases, rolled up by the backend's own task on each, the fleet's hot code over REST
    summing both, the group's flame graph and compare merging both databases' stacks, and each host's top
    functions, block samples and data coverage its own; B stopped, the views are 503 naming B; B started
    again, it answers again; a host deleted over REST leaves nothing on B."""
    b = clusters[1]
    url_a, url_b = await _databases(clusters, "hp_backend")
    backend = Backend(data_folder, env={"DATABASE_URL": url_a, "HOTPATH_DB_NODES": url_b, "HOTPATH_ROLLUP_LAG_S": "1"})
    await backend.start()
    t0 = (datetime.now(UTC) - timedelta(hours=2)).replace(second=0, microsecond=0)
    engine_a, engine_b = make_engine(url_a), make_engine(url_b)
    agents = []
    try:
        # Two hosts on each database, by the coordinator's own placement.
        placed: dict[int, list[str]] = {0: [], 1: []}
        async with engine_a.connect() as conn:
            for i in range(40):
                host = f"scripted-nodes-{i}"
                r = (
                    await conn.execute(
                        text(
                            "SELECT satisfies_hash_partition("
                            "CAST('hotpath_nodes.delivery_marks' AS regclass), 2, 1, CAST(:h AS text))"
                        ),
                        {"h": host},
                    )
                ).scalar_one()
                if len(placed[int(r)]) < 2:
                    placed[int(r)].append(host)
        assert len(placed[0]) == len(placed[1]) == 2, placed
        async with await backend.admin() as client:
            for k, host in enumerate(placed[0] + placed[1]):
                agent = await backend.agent(host, hostname=host, kernel_tag="nodes-build")
                await agent.connect()
                await wait_catalog_complete(client, host)
                agents.append(agent)
                for i in range(20):
                    # Function k % 3 called from the syscall entry (fn_00007): its block samples and a stack.
                    batch = agent.stack_batch(
                        int((t0 + timedelta(seconds=i)).timestamp()) * 1_000_000_000,
                        [([("k", k % 3, 0), ("k", 7, 0x20)], 100, "dd", 0, k + 1)],
                    )
                    seq = await agent.send_batch(batch)
                await wait_for_ack(agent, seq, HANG_S)
            for engine, hosts in ((engine_a, placed[0]), (engine_b, placed[1])):
                async with engine.connect() as conn:
                    got = dict(
                        (await conn.execute(text("SELECT host_id, count(*) FROM sample_intervals GROUP BY 1"))).all()
                    )
                assert got == dict.fromkeys(hosts, 20), "each host's rows on its own database"
            group = (await client.get("/api/v1/fleet/groups")).json()["items"][0]["id"]
            url = f"/api/v1/fleet/groups/{group}/hot-code"
            rng = {"from": t0.isoformat(), "to": (t0 + timedelta(minutes=1)).isoformat()}
            want = {h: 20 * (k + 1) for k, h in enumerate(placed[0] + placed[1])}

            async def rolled() -> bool:
                r = await client.get(url, params=rng)
                return r.status_code == 200 and {h["id"]: h["busy_samples"] for h in r.json()["hosts"]} == want

            await wait_until(rolled, HANG_S)
            body = (await client.get(url, params=rng)).json()
            per_fn: dict[int, int] = {}
            for k in range(4):
                per_fn[k % 3] = per_fn.get(k % 3, 0) + 20 * (k + 1)
            assert sorted(i["samples"] for i in body["items"]) == sorted(per_fn.values())
            # The group's flame graph: every host's stacks, from both databases' stack rollups, merged.
            flame_url = f"/api/v1/fleet/groups/{group}/flamegraph"

            async def flame_rolled() -> bool:
                r = await client.get(flame_url, params=rng)
                return r.status_code == 200 and {h["id"]: h["samples"] for h in r.json()["hosts"]} == want

            await wait_until(flame_rolled, HANG_S)
            fg = (await client.get(flame_url, params=rng)).json()
            names = [f["name"] for f in fg["frames"]]
            entry = fg["nodes"]["parent"].index(0)  # the root's one child: fn_00007
            assert (names[fg["nodes"]["frame"][entry]], fg["nodes"]["total"][entry]) == ("fn_00007", 200)
            leaves = {
                names[f]: t
                for f, p, t in zip(fg["nodes"]["frame"], fg["nodes"]["parent"], fg["nodes"]["total"], strict=True)
                if p == entry
            }
            assert sorted(leaves.values()) == sorted(per_fn.values()), leaves
            diff = await client.get(
                f"{flame_url}/diff", params={**rng, "a_label": "missing=x", "b_without": "missing=x"}
            )
            assert diff.status_code == 200 and (diff.json()["a_samples"], diff.json()["b_samples"]) == (0, 200)
            # A host's own pages read its series from its database, wherever it is placed.
            covered: list[int] = []
            for k, host in enumerate(placed[0] + placed[1]):
                top = await client.get(f"/api/v1/hosts/{host}/top-functions", params=rng)
                assert top.status_code == 200, top.text
                assert (top.json()["total_samples"], [i["samples"] for i in top.json()["items"]]) == (
                    20 * (k + 1),
                    [20 * (k + 1)],
                ), host
                # The function view's block samples and the data coverage: the same series, read from its node.
                fid = top.json()["items"][0]["function_id"]
                blocks = await client.get(f"/api/v1/hosts/{host}/functions/{fid}/samples", params=rng)
                assert blocks.status_code == 200, blocks.text
                assert blocks.json()["total"] == 20 * (k + 1), (host, blocks.json())
                cov = await client.get(f"/api/v1/hosts/{host}/coverage", params={"window_s": 3 * 3600})
                assert cov.status_code == 200, cov.text
                covered.append(sum(b["covered_ms"] for b in cov.json()["buckets"]))
            assert covered[0] > 0 and covered == [covered[0]] * 4, f"covered ms per host {covered}"
            await _plan_on_a_node_host(backend, client, agents[3], placed[1][1], engine_b)
            await asyncio.to_thread(b.stop, "fast")
            try:
                for view in (url, flame_url, f"{flame_url}/diff"):
                    r = await client.get(view, params=rng)
                    assert r.status_code == 503, (view, r.text)
                    assert "node 1 (" in r.json()["detail"] and str(b.root) in r.json()["detail"]
            finally:
                await asyncio.to_thread(b.start)
            await wait_until(rolled, HANG_S)
            # Deleting a host placed on B deletes its series and marks there too.
            gone = placed[1][0]
            assert (await client.delete(f"/api/v1/hosts/{gone}")).status_code == 204
            async with engine_b.connect() as conn:
                left = {
                    t: (
                        await conn.execute(text(f"SELECT count(*) FROM {t} WHERE host_id = :h"), {"h": gone})
                    ).scalar_one()
                    for t in ("sample_intervals", "sample_totals_1m", "sample_functions_1h", "delivery_marks")
                }
            assert left == dict.fromkeys(left, 0)
    finally:
        for agent in agents:
            await agent.close()
        await engine_a.dispose()
        await engine_b.dispose()
        await backend.kill(signal.SIGTERM)


async def _plan_on_a_node_host(backend: Backend, client: Any, agent: Any, host: str, engine_b: AsyncEngine) -> None:
    """A process plan of a host placed on B: made, approved by another user, installed with its windows
    measured (their points stored on B), compared and reverted. The plan's record, over GET and in the
    revert's answer, compares the windows read from B."""
    r = await client.post(f"/api/v1/hosts/{host}/targets", json={"pid": 4242})
    assert r.status_code == 202, r.text
    target, digest = "p4242-1000", agent.process[3]

    async def ready() -> bool:
        mods = (await client.get(f"/api/v1/hosts/{host}/modules", params={"target": target})).json()
        return bool(mods) and mods[0]["complete"]

    await wait_until(ready, HANG_S)
    base = f"/api/v1/hosts/{host}/plans"
    r = await client.post(base, json={"target": target, "digest": digest, "function_index": 2, "seconds": 1})
    assert r.status_code == 202, r.text
    plan_id = r.json()["id"]

    async def plan(*states: str) -> dict[str, Any] | None:
        p = (await client.get(f"{base}/{plan_id}")).json()
        return p if p["state"] in states else None

    await wait_until(lambda: plan("ready"), HANG_S)
    assert (await client.post(f"{base}/{plan_id}/request")).status_code == 200
    approver = await make_user(client, "approver", "nodes")
    async with httpx.AsyncClient(
        base_url=backend.url,
        timeout=30,
        headers={"Authorization": f"Bearer {await token_for(backend.url, *approver)}"},
    ) as other:
        assert (await other.post(f"{base}/{plan_id}/approve")).status_code == 200
    assert (await client.post(f"{base}/{plan_id}/install", json={"window_s": 1})).status_code == 200

    async def window(which: str) -> str | None:
        mid = (await client.get(f"{base}/{plan_id}")).json()[f"{which}_measurement"]
        return mid if mid is not None and mid in agent.measurements else None

    before = await wait_until(lambda: window("before"), HANG_S)
    await wait_for_ack(agent, await agent.send_measurement(before, time.time_ns() - 10**9, [(0, 1000, 4e6)]), HANG_S)
    installed = await wait_until(lambda: plan("installed", "install_failed"), HANG_S)
    assert installed["state"] == "installed", installed["error"]
    after = await wait_until(lambda: window("after"), HANG_S)
    await wait_for_ack(agent, await agent.send_measurement(after, time.time_ns() - 10**9, [(0, 2000, 6e6)]), HANG_S)
    async with engine_b.connect() as conn:
        on_b = (
            await conn.execute(text("SELECT count(*) FROM measurement_points WHERE host_id = :h"), {"h": host})
        ).scalar_one()
    assert on_b == 2, "the windows' points are stored on B"

    async def compared() -> dict[str, Any] | None:
        c = (await client.get(f"{base}/{plan_id}")).json()["comparison"]
        return c if c and c["after"] and c["after"]["calls"] == 2000 else None

    c = await wait_until(compared, HANG_S)
    assert (c["before"]["calls"], c["before"]["wall_ns_per_call"], c["after"]["wall_ns_per_call"]) == (1000, 4000, 3000)
    r = await client.post(f"{base}/{plan_id}/revert")
    assert r.status_code == 200 and r.json()["state"] == "reverting", r.text
    assert r.json()["comparison"] == c, "the step's answer compares the windows read from B too"
    assert (await wait_until(lambda: plan("reverted"), HANG_S))["state"] == "reverted"


def test_node_urls_are_parsed_and_named_without_their_credentials() -> None:
    urls = nodes.parse(" postgresql://hp:s3cr%2Ct@db-b:5433/hotpath,\npostgres://hp@db-c/hotpath?sslmode=require ")
    assert urls == ["postgresql://hp:s3cr%2Ct@db-b:5433/hotpath", "postgres://hp@db-c/hotpath?sslmode=require"]
    assert [nodes.label(i, u) for i, u in enumerate(urls, start=1)] == [
        "node 1 (db-b:5433/hotpath)",
        "node 2 (db-c:5432/hotpath)",
    ]
    assert nodes.label(3, "postgresql://hp:pw@[bad") == "node 3"
    assert nodes.parse("") == []


async def test_a_pending_migration_detaches_the_coordinators_tables_and_setup_attaches_them_again(clusters) -> None:
    """What the server does at start when a migration is pending (a partition's columns cannot change): the
    coordinator's tables detached from the spread parents, the migrations, the parents made again; and a
    different number of databases refused."""
    url_a, url_b = await _databases(clusters, "hp_migrate")

    async def attached() -> dict[str, str]:
        engine = make_engine(url_a)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(
                    text("""
                    SELECT p.relname, string_agg(c.relname || ' ' || pg_get_expr(c.relpartbound, c.oid), '; '
                                                 ORDER BY c.relname)
                    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
                    WHERE p.relnamespace = CAST('hotpath_nodes' AS regnamespace) GROUP BY 1"""),
                )
                return {r[0]: r[1] for r in rows}
        finally:
            await engine.dispose()

    await asyncio.to_thread(upgrade_database, url_a)
    await asyncio.to_thread(nodes.setup, url_a, [url_b])
    spread_layout = await attached()
    assert set(spread_layout) == set(nodes.SPREAD_TABLES)
    assert spread_layout["sample_intervals"] == (
        "sample_intervals FOR VALUES WITH (modulus 2, remainder 0); "
        "sample_intervals_n1 FOR VALUES WITH (modulus 2, remainder 1)"
    )
    assert not await asyncio.to_thread(nodes.migration_pending, url_a)
    await asyncio.to_thread(downgrade_database, url_a, "-1")
    assert await asyncio.to_thread(nodes.migration_pending, url_a)
    assert await asyncio.to_thread(nodes.detach, url_a) == len(nodes.SPREAD_TABLES)
    assert all("remainder 0" not in v for v in (await attached()).values())
    await asyncio.to_thread(upgrade_database, url_a)
    await asyncio.to_thread(nodes.setup, url_a, [url_b])
    assert await attached() == spread_layout
    refused = r"spread over 2 databases, HOTPATH_DB_NODES makes 3 \(the coordinator and 2 node"
    with pytest.raises(RuntimeError, match=refused):
        await asyncio.to_thread(nodes.setup, url_a, [url_b, url_b])
