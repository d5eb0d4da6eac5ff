# SPDX-License-Identifier: Apache-2.0
"""Several database nodes (app.storage.nodes, issue 19): the backend's storage and ingest writer against two
real Postgres clusters started here (Debian's postgresql-15: the embedded Postgres has no postgres_fdw), the
coordinator A and one node B, hosts placed on both by the hash of their id.

- A batch commits on its host's database only, with its delivery mark; the fleet's hot code, read through
  the coordinator, equals the sums of the raw rows both databases hold.
- B stopped: a batch of a B host fails and is not acknowledged, A's hosts keep being stored, the fleet view
  fails naming B. B restarted (fast) and killed (-9) while agents send: every acknowledged batch is stored
  exactly once afterwards, a resend after a failure included (the agents resend from the node's mark).
- Hosts moved when a node is added and removed (`python -m app nodes move`): each host's rows on its new
  database only, as many as before, through interrupted runs.
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

import grpc
import httpx
import orjson
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.db import downgrade_database, make_engine, make_sessionmaker, upgrade_database
from app.storage import fleet, node_moves, nodes
from app.storage.ingest import IngestWriter, Item, SampleRow
from app.storage.samples import TimeRange
from app.storage.series import partitions, rollups
from app.storage.series.layout import ROLLUP_TABLES
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

    def processes(self) -> tuple[int, list[int]]:
        """The postmaster's pid and its children's (its backends and auxiliary processes)."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout.split()
        return pid, [int(c) for c in children]

    def pause(self) -> None:
        """The postmaster and its backends stopped with SIGSTOP: a server that hangs on its established
        connections (and takes new ones into the socket's backlog without answering)."""
        pid, children = self.processes()
        for p in (pid, *children):
            os.kill(p, signal.SIGSTOP)

    def resume(self) -> None:
        pid, children = self.processes()
        for p in (pid, *children):
            os.kill(p, signal.SIGCONT)

    def kill9(self) -> None:
        """The postmaster killed with SIGKILL (its backends end when they notice, as after a crash)."""
        pid, children = self.processes()
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
            await _enrol(conn, hosts)
        yield Spread(a, b, engine, spread, writer, on_a, on_b)
    finally:
        await writer.stop()
        nodes.configure(None)
        await spread.dispose()
        await engine.dispose()


async def _enrol(conn: AsyncConnection, hosts: list[str]) -> None:
    """The hosts on the coordinator, and a catalog of FUNCS functions their rows name."""
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


async def _fleet(s: Spread, lo: datetime, hi: datetime, **ask: Any) -> dict[str, Any]:
    """The fleet's hot code of the nodes' group, each database read directly (`fleet._per_database`)."""
    how = {"min_share": 0.01, "limit": 500, "offset": 0, "sort": "samples", "descending": True, **ask}
    async with make_sessionmaker(s.engine)() as session:
        group = (await fleet.groups(session, {}, 10, 0, "hosts", True))["items"][0]
        return await fleet.hot_code(session, group, {}, TimeRange(lo, hi), **how)


async def _fleet_through_parents(s: Spread, lo: datetime, hi: datetime, **ask: Any) -> dict[str, Any]:
    """The same answer as the fleet read it before session 25: the one-database path on the coordinator with
    the spread parents first in the search path, so each node host's rows come through its foreign partition
    and the watermarks from `hotpath_nodes.series_state`."""
    how = {"min_share": 0.01, "limit": 500, "offset": 0, "sort": "samples", "descending": True, **ask}
    nodes.configure(None)
    try:
        async with make_sessionmaker(s.engine)() as session:
            await session.execute(
                text(f"SELECT set_config('search_path', '{nodes.SCHEMA}, ' || current_setting('search_path'), true)")
            )
            group = (await fleet.groups(session, {}, 10, 0, "hosts", True))["items"][0]
            return await fleet.hot_code(session, group, {}, TimeRange(lo, hi), **how)
    finally:
        nodes.configure(s.spread)


async def _roll_up(s: Spread) -> None:
    # As the server's rollup loop does: a node's pass is given the coordinator's hosts' groups.
    async with s.engine.connect() as conn:
        groups = await rollups.host_groups(conn)
    for e in (s.engine, s.spread.node(1).engine):
        await rollups.run_once(e, lag_s=0, groups=groups)


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
    # Read per database, the whole answer (order, cells, shares, hosts, rollups, covered range) is the one the
    # coordinator's foreign partitions give, rendered to the same bytes; in other sorts and pages too.
    assert got["hosts"] and any(c["host_id"] in s.on_b for i in got["items"] for c in i["cells"])
    assert orjson.dumps(got) == orjson.dumps(await _fleet_through_parents(s, lo, wm_1m))
    for ask in ({"sort": "hosts", "descending": False}, {"sort": "name", "limit": 3, "offset": 2, "min_share": 0.2}):
        assert orjson.dumps(await _fleet(s, lo, wm_1m, **ask)) == orjson.dumps(
            await _fleet_through_parents(s, lo, wm_1m, **ask)
        ), ask


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


async def test_a_node_that_hangs_fails_the_fleet_within_the_bound(spread: Spread, monkeypatch) -> None:
    """B's postmaster and backends stopped (SIGSTOP) on their established connections: the fleet's read of B
    does not hang the request, it fails with NodeUnavailable naming B once its part has had the bound
    (nodes.READ_TIMEOUT_S, made 3 s here); B continued, the fleet answers again."""
    s = spread
    bound = 3.0
    monkeypatch.setattr(nodes, "READ_TIMEOUT_S", bound)
    lo = (datetime.now(UTC) - timedelta(minutes=45)).replace(second=0, microsecond=0)
    await _fleet(s, lo, datetime.now(UTC))  # B's pooled connections are established
    s.b.pause()
    try:
        t0 = time.monotonic()
        with pytest.raises(nodes.NodeUnavailable) as err:
            async with asyncio.timeout(HANG_S):
                await _fleet(s, lo, datetime.now(UTC))
        took = time.monotonic() - t0
    finally:
        s.b.resume()
    assert err.value.labels == [s.spread.node(1).label] and str(s.b.root) in str(err.value)
    # The bound once (the watermarks' part is the first to wait for B), not the hang (the read through the
    # coordinator's foreign partitions still waited at 40 s); the slack is for a loaded machine.
    assert bound <= took < 10 * bound, took
    got = await _fleet(s, lo, datetime.now(UTC))
    assert {h["id"] for h in got["hosts"]} == set(s.on_a + s.on_b)


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
            # From the build's stack rollup, each database's part of it added (B's late batches summed into it
            # with the coordinator's groups by the ingest writer).
            assert fg["rollup"] == "group"
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
                # A host page: B's host's series cannot be read (503, as any unreachable database), A's can.
                on_b = await client.get(f"/api/v1/hosts/{placed[1][0]}/top-functions", params=rng)
                assert on_b.status_code == 503 and "unavailable" in on_b.json()["detail"], on_b.text
                on_a = await client.get(f"/api/v1/hosts/{placed[0][0]}/top-functions", params=rng)
                assert on_a.status_code == 200 and on_a.json()["total_samples"] == 20, on_a.text
            finally:
                await asyncio.to_thread(b.start)
            await wait_until(rolled, HANG_S)
            # B hangs (SIGSTOP: its connections stay open, nothing answers). A Hello of one of its hosts reads
            # the host's delivery marks on B: refused UNAVAILABLE within the nodes' read bound, naming B,
            # rather than held with a connection of the coordinator's pool; a host on A still connects.
            await agents[2].close()
            await agents[0].close()
            b.pause()
            try:
                t = time.monotonic()
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    async with asyncio.timeout(nodes.READ_TIMEOUT_S + HANG_S):  # a hang bound
                        await agents[2].connect()
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
                assert "node 1 (" in (refused.value.details() or ""), refused.value.details()
                # Within the read bound (twice it: a loaded machine is slow to see it pass).
                assert time.monotonic() - t < 2 * nodes.READ_TIMEOUT_S
                await agents[0].connect()  # A's host: its marks are on the coordinator
            finally:
                b.resume()
            await agents[2].connect()
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


async def test_a_nodes_part_is_named_only_when_the_node_does_not_answer() -> None:
    """`Nodes.each` without databases (the engines never connect): a connection-class error or no answer
    within the bound names the node, every such node at once; another error is raised as it is; a part past
    the bound is cancelled, not waited for; `beside` drops the nodes' parts when the coordinator's fails."""
    spread = nodes.Nodes(make_engine("postgresql://hp@db-a/hotpath"), ["postgresql://hp:pw@db-b/hotpath"] * 3)
    one, two, three = spread.nodes
    hung = asyncio.Event()

    async def answer(node: nodes.Node) -> int:
        return node.index

    async def down(node: nodes.Node) -> int:
        if node is two:
            raise OperationalError("SELECT 1", {}, Exception("connection refused"))
        if node is three:
            hung.set()
            await asyncio.sleep(HANG_S)
        return node.index

    async def broken(node: nodes.Node) -> int:
        if node is one:
            raise ProgrammingError("SELECT 1", {}, Exception("no such table"))
        raise OSError("unreachable")

    try:
        assert await spread.each(answer, spread.nodes) == [1, 2, 3]
        assert await spread.each(answer, []) == []
        t0 = time.monotonic()
        with pytest.raises(nodes.NodeUnavailable) as err:
            await spread.each(down, spread.nodes, timeout_s=0.3)
        assert time.monotonic() - t0 < 5 and hung.is_set()
        assert err.value.labels == [two.label, three.label]
        assert len(nodes._ENDING) == 1, "the hung part is left to end, cancelled"
        await asyncio.sleep(0.05)
        assert not nodes._ENDING
        with pytest.raises(ProgrammingError):
            await spread.each(broken, spread.nodes)

        async def coordinator_fails() -> int:
            await asyncio.sleep(0.05)
            raise ProgrammingError("SELECT 1", {}, Exception("coordinator"))

        hung.clear()
        with pytest.raises(ProgrammingError, match="coordinator"):
            await spread.beside(coordinator_fails(), down, [three])
        assert hung.is_set()
        await asyncio.sleep(0.05)
        assert not nodes._ENDING, "the node's part was cancelled, not waited for"
    finally:
        await spread.dispose()
        await spread.coordinator.dispose()


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
    # Every coordinator table still attached is detached (the downgrade may have dropped some: a table the
    # newest migration made goes with its partition of the parent).
    still = [t for t, parts in (await attached()).items() if "remainder 0" in parts]
    assert len(still) >= len(nodes.SPREAD_TABLES) - 2 and "sample_intervals" in still
    assert await asyncio.to_thread(nodes.detach, url_a) == len(still)
    assert all("remainder 0" not in v for v in (await attached()).values())
    await asyncio.to_thread(upgrade_database, url_a)
    await asyncio.to_thread(nodes.setup, url_a, [url_b])
    assert await attached() == spread_layout
    refused = (
        r"spread over 2 databases, HOTPATH_DB_NODES makes 3 \(the coordinator and 2 node"
        r".*run `python -m app nodes move`"
    )
    with pytest.raises(RuntimeError, match=refused):
        await asyncio.to_thread(nodes.setup, url_a, [url_b, url_b])


async def _where(
    engines: list[AsyncEngine], hosts: list[str]
) -> tuple[dict[tuple[str, str], int], dict[str, set[int]]]:
    """Every spread table's rows per (table, host) summed over the databases, and the databases (their
    positions in `engines`) each host has rows on."""
    counts: dict[tuple[str, str], int] = {}
    where: dict[str, set[int]] = {h: set() for h in hosts}
    for i, engine in enumerate(engines):
        async with engine.connect() as conn:
            for t in nodes.SPREAD_TABLES:
                if (await conn.execute(text("SELECT to_regclass(:t)"), {"t": t})).scalar_one() is None:
                    continue  # a database that was never a node has no tables
                for h, n in await conn.execute(
                    text(f"SELECT host_id, count(*) FROM {t} WHERE host_id = ANY(:h) GROUP BY 1"), {"h": hosts}
                ):
                    counts[(t, h)] = counts.get((t, h), 0) + int(n)
                    where[h].add(i)
    return counts, where


async def _move_hosts(engine: AsyncEngine) -> list[str]:
    """Eight host names: two that stay on the coordinator with 2 and 3 databases, two on remainder 1 of 2
    and 2 of 3 (a node that keeps them at another position), four others (by Postgres' hash of text)."""
    async with engine.connect() as conn:
        await conn.execute(text("CREATE TEMP TABLE hp_pick (host_id text) PARTITION BY HASH (host_id)"))
        rows = await conn.execute(
            text("""
            SELECT h, (SELECT r FROM generate_series(0, 1) r
                       WHERE satisfies_hash_partition(CAST('pg_temp.hp_pick' AS regclass), 2, r, h)),
                      (SELECT r FROM generate_series(0, 2) r
                       WHERE satisfies_hash_partition(CAST('pg_temp.hp_pick' AS regclass), 3, r, h))
            FROM (SELECT 'move-host-' || lpad(i::text, 2, '0') AS h FROM generate_series(0, 99) i) c ORDER BY h""")
        )
        placed = [(h, (r2, r3)) for h, r2, r3 in rows]
    chosen = [h for h, r in placed if r == (0, 0)][:2] + [h for h, r in placed if r == (1, 2)][:2]
    chosen += [h for h, _r in placed if h not in chosen][:4]
    return sorted(chosen)


def _stable(
    got: tuple[dict[tuple[str, str], int], dict[str, set[int]]],
) -> tuple[dict[tuple[str, str], int], dict[str, set[int]]]:
    """`_where` without the rollup tables' row counts: a move first rolls every database up to its minute,
    which adds rollup rows when the test's rows above the watermark have become a closed minute meanwhile
    (the rollups' sums are compared through the fleet's hot code instead)."""
    return {k: n for k, n in got[0].items() if k[0] not in ROLLUP_TABLES}, got[1]


def _hot(got: dict[str, Any]) -> tuple[dict[int, int], dict[str, int]]:
    """A hot code answer's samples per function and busy samples per host."""
    return {i["function_id"]: i["samples"] for i in got["items"]}, {h["id"]: h["busy_samples"] for h in got["hosts"]}


async def test_hosts_move_when_a_node_is_added_and_removed(clusters, monkeypatch) -> None:
    """`python -m app nodes move`'s work (app.storage.node_moves): hosts with rows on the coordinator alone;
    a dry run changes nothing; a node added, the move interrupted twice (after a destination's commit, before
    a source's delete) and run again: each host's rows on its new database only, as many as before, the
    fleet's hot code unchanged, and the writer goes on from the moved delivery marks on the right database;
    a third database put before it in the list: only the hosts whose database changes move; both removed:
    every row back on the coordinator."""
    a, b = clusters
    url_a, url_b = await _databases(clusters, "hp_move")
    await asyncio.to_thread(upgrade_database, url_a)
    engine, engine_b = make_engine(url_a), make_engine(url_b)
    hosts = await _move_hosts(engine)
    before_active = nodes.active()
    nodes.configure(None)
    said: list[str] = []
    spread2: nodes.Nodes | None = None
    spread3: nodes.Nodes | None = None
    engine_c: AsyncEngine | None = None
    try:
        now = datetime.now(UTC)
        await partitions.ensure(engine, now, timedelta(hours=6), timedelta(days=2))
        async with engine.begin() as conn:
            await _enrol(conn, hosts)
        writer = IngestWriter(engine)
        writer.start()
        s = Spread(a, b, engine, None, writer, hosts, [])  # type: ignore[arg-type]  # no nodes yet
        base = (now - timedelta(minutes=30)).replace(second=0, microsecond=0)
        agents = [Agent(s, h, base) for h in hosts]
        for agent in agents:
            agent.instance = "move-test"
            for _ in range(20):
                assert await agent.send(agent.next)
                agent.next += 1
        await rollups.run_once(engine, lag_s=0)
        async with engine.connect() as conn:
            wm_1m, _ = await rollups.watermarks(conn)
        for agent in agents:  # rows above the watermark too: the move's own roll-up sums them
            agent.base = wm_1m + timedelta(seconds=1) - (agent.next - 1) * STEP
            for _ in range(3):
                assert await agent.send(agent.next)
                agent.next += 1
        await writer.stop()
        counts, where = await _where([engine], hosts)
        assert counts[("sample_intervals", hosts[0])] == 23 and counts[("sample_totals_1m", hosts[0])] >= 1
        hot = _hot(await _fleet(s, base, wm_1m))
        assert hot[0] and len(hot[1]) == len(hosts)

        # Refused: a backend running (it holds the run lock), a database twice (by its address or not).
        running = await asyncio.to_thread(node_moves.backend_lock, url_a, [])
        try:
            with pytest.raises(node_moves.MoveRefused, match="a backend is running"):
                await asyncio.to_thread(node_moves.move, url_a, [url_b])
        finally:
            running.close()
        with pytest.raises(node_moves.MoveRefused, match="are the same database"):
            await asyncio.to_thread(node_moves.move, url_a, [url_a])
        also_a = url_a.replace(f"host={a.root}&", f"host={a.root}/&")  # another spelling of A's address
        assert also_a != url_a
        with pytest.raises(node_moves.MoveRefused, match="same database under two addresses"):
            await asyncio.to_thread(node_moves.move, url_a, [also_a])

        # A dry run says what would move and changes nothing (B has not even its tables yet).
        plan = await asyncio.to_thread(node_moves.move, url_a, [url_b], None, True, said.append)
        moving = {m.host_id for m in plan.moves}
        assert 0 < len(moving) < len(hosts), "some hosts move to B, the others stay"
        assert f"{len(moving)} of {len(hosts)} host(s) with series move" in said[-1]
        assert sum(plan.rows.values()) == sum(n for (_t, h), n in counts.items() if h in moving)
        async with engine_b.connect() as conn:
            assert (await conn.execute(text("SELECT to_regclass('sample_intervals')"))).scalar_one() is None
        assert await _where([engine], hosts) == (counts, where)
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT to_regclass('hotpath_node_move')"))).scalar_one() is None

        # Interrupted after a destination committed a host (before its journal said so), then before a
        # source's delete: each run again goes on, nothing doubled, nothing lost.
        real_journal, real_delete = node_moves._journal, node_moves._delete_source
        journalled: list[str] = []

        def journal_fails_third_copy(lock: Any, m: node_moves.Move, state: str) -> None:
            if state == "copied":
                journalled.append(m.host_id)
                if len(journalled) == 3:
                    raise RuntimeError("injected: crashed after the destination's commit")
            real_journal(lock, m, state)

        def delete_fails(src: Any, host_id: str) -> None:
            raise RuntimeError("injected: crashed before the source's delete")

        monkeypatch.setattr(node_moves, "_journal", journal_fails_third_copy)
        with pytest.raises(RuntimeError, match="after the destination's commit"):
            await asyncio.to_thread(node_moves.move, url_a, [url_b])
        with pytest.raises(RuntimeError, match="interrupted: run `python -m app nodes move` again"):
            await asyncio.to_thread(node_moves.backend_lock, url_a, [url_b])
        monkeypatch.setattr(node_moves, "_journal", real_journal)
        monkeypatch.setattr(node_moves, "_delete_source", delete_fails)
        with pytest.raises(RuntimeError, match="before the source's delete"):
            await asyncio.to_thread(node_moves.move, url_a, [url_b])
        async with engine.connect() as conn:
            states = dict((await conn.execute(text("SELECT host_id, state FROM hotpath_node_moves"))).all())
        assert sorted(states.values()).count("done") == 2 and states[journalled[2]] == "copied", states
        monkeypatch.setattr(node_moves, "_delete_source", real_delete)
        said.clear()
        t0 = time.monotonic()
        plan = await asyncio.to_thread(node_moves.move, url_a, [url_b], None, False, said.append)
        print(f"\nmove to B, resumed: {time.monotonic() - t0:.1f} s; " + " | ".join(said))
        assert plan.resumed and {m.host_id for m in plan.moves} == moving

        spread2 = nodes.Nodes(engine, [url_b])
        nodes.configure(spread2)
        placed = await spread2.place(hosts)
        assert {h for h in hosts if placed[h] == 1} == moving
        assert _stable(await _where([engine, engine_b], hosts)) == _stable((counts, {h: {placed[h]} for h in hosts}))
        async with engine.connect() as conn:
            for t in ("hotpath_node_move", "hotpath_node_moves"):
                assert (await conn.execute(text("SELECT to_regclass(:t)"), {"t": t})).scalar_one() is None
        assert _hot(await _fleet(s, base, wm_1m)) == hot
        # The backend's start with the new list: the layout is there already, and the writer goes on from
        # each host's moved mark, storing on the host's new database.
        await asyncio.to_thread(nodes.setup, url_a, [url_b])
        (await asyncio.to_thread(node_moves.backend_lock, url_a, [url_b])).close()
        writer = IngestWriter(engine, nodes=spread2)
        writer.start()
        s.writer, s.spread = writer, spread2
        try:
            for agent in agents:
                assert await agent.mark() == agent.next - 1
                assert await agent.send(agent.next)
                agent.next += 1
        finally:
            await writer.stop()
        after, where = await _where([engine, engine_b], hosts)
        assert where == {h: {placed[h]} for h in hosts}
        assert all(after[("sample_intervals", h)] == counts[("sample_intervals", h)] + 1 for h in hosts)
        counts = after
        # The moved rollups and what each database rolls up after the move sum exactly the raw rows.
        s.on_a, s.on_b = [h for h in hosts if h not in moving], sorted(moving)
        await _check_fleet_equals_both_nodes(s, base)
        counts, _ = await _where([engine, engine_b], hosts)  # the new rows' rollups too

        # A third database C put before B in the list: a host moves when its database changes, not its
        # position (B's hosts that stay on B, now remainder 2, stay put).
        admin = make_engine(b.url).execution_options(isolation_level="AUTOCOMMIT")
        async with admin.connect() as conn:
            await conn.execute(text("CREATE DATABASE hp_move_c"))
        await admin.dispose()
        url_c = url_b.replace("/hp_move?", "/hp_move_c?")
        engine_c = make_engine(url_c)
        plan = await asyncio.to_thread(node_moves.move, url_a, [url_c, url_b])
        spread3 = nodes.Nodes(engine, [url_c, url_b])
        nodes.configure(spread3)
        placed3 = await spread3.place(hosts)
        was = {h: "ab"[placed[h]] for h in hosts}
        now_on = {h: "acb"[placed3[h]] for h in hosts}
        assert any(was[h] == now_on[h] == "b" for h in hosts), "a host stays on B at another position"
        assert {m.host_id for m in plan.moves} == {h for h in hosts if was[h] != now_on[h]}
        assert _stable(await _where([engine, engine_c, engine_b], hosts)) == _stable(
            (counts, {h: {placed3[h]} for h in hosts})
        )
        assert _hot(await _fleet(s, base, wm_1m)) == hot

        # A host id with rows and a mark on a node but no longer enrolled (deleted while the node was down).
        candidates = await spread3.place([f"move-gone-{i}" for i in range(20)])
        gone = next(h for h, r in candidates.items() if r)
        async with (engine_c if candidates[gone] == 1 else engine_b).begin() as conn:
            await conn.execute(
                text("INSERT INTO delivery_marks (host_id, instance_id, seq, updated_at) VALUES (:h, 'x', 7, now())"),
                {"h": gone},
            )

        # B and C removed: every host back on the coordinator, no rows left on B or C, no spread parents; the
        # unenrolled host's rows deleted, not copied (the coordinator's marks reference hosts).
        nodes.configure(None)
        said.clear()
        plan = await asyncio.to_thread(node_moves.move, url_a, [], None, False, said.append)
        assert {m.host_id for m in plan.moves} == {h for h in hosts if placed3[h]} | {gone} and not plan.resumed
        assert [m.discard for m in plan.moves if m.host_id == gone] == [True]
        assert "1 of them no longer enrolled" in said[0]
        assert (await _where([engine, engine_c, engine_b], [gone]))[1] == {gone: set()}
        assert _stable(await _where([engine, engine_c, engine_b], hosts)) == _stable((counts, {h: {0} for h in hosts}))
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT to_regnamespace('hotpath_nodes')"))).scalar_one() is None
            assert not (await conn.execute(text("SELECT srvname FROM pg_foreign_server"))).all()
        assert _hot(await _fleet(s, base, wm_1m)) == hot
        (await asyncio.to_thread(node_moves.backend_lock, url_a, [])).close()
    finally:
        nodes.configure(before_active)
        for spread_n in (spread2, spread3):
            if spread_n is not None:
                await spread_n.dispose()
        if engine_c is not None:
            await engine_c.dispose()
        await engine.dispose()
        await engine_b.dispose()
