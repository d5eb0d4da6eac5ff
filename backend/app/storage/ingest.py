# SPDX-License-Identifier: Apache-2.0
"""The ingest writer: every data message of every agent stream of this process, stored in group
commits.

Agent streams hand over checked, mapped data (`Item`s) and go on reading; one task takes what has
queued (up to a limit, after waiting a few milliseconds for more) and writes it in ONE transaction:
one COPY per raw table (a sample interval is one row whatever its number of blocks), the delivery marks
as one upsert, gaps, host presence, measurement states, and the rollups of rows that arrived below a
watermark. Each item's future completes when its transaction has committed, so a stream acknowledges a
batch only once it is stored; a failed transaction fails every item in it (their streams end with
UNAVAILABLE and the agents resend). The queue is bounded: when the database falls behind, streams wait
in `submit`, stop reading, and gRPC's flow control slows the agents down (backpressure) instead of the
backend's memory growing.

While commits fail (the database refuses writes: a full disk, SQLSTATE 53100; or is unreachable) the
writer is `failing`: the first failure logs one error with its SQLSTATE and message, every failed commit
a warning, and the first commit that stores data again logs how long it failed (the process's metrics
show it as hotpath_ingest_failing). The writer itself keeps running: it needs no restart.

With several database nodes (app.storage.nodes) each database has a lane of its own: the writer routes a
commit's items by their host's database and hands each group to that database's lane, a task that commits
its groups in order (a host is always on one database, so a stream's items stay in order). A node that hangs
on an established connection (a stopped server, a network that drops packets) then holds its own hosts'
commits only, each failed after `node_timeout_s`; its lane takes a bounded number of groups and fails the
ones beyond that at once, so the other databases' hosts are stored and acknowledged meanwhile.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.db import describe_error
from app.core.tasks import cancel_and_wait
from app.protocol.stack_defs import BatchStacks
from app.storage import stacks as stack_store
from app.storage.nodes import Node, Nodes
from app.storage.series import copytext, partitions, rollups

log = logging.getLogger("hotpath.ingest")

MAX_ITEMS_PER_COMMIT = 2000
MAX_POINTS_PER_COMMIT = 400_000
GATHER_S = 0.005  # after the first item, wait this long for more to share the commit
# How long a node's commit may take before its items fail (their agents resend): a commit of the largest
# size takes ~1 s on a loaded machine (docs/decisions.md, "Several database nodes, built"); a node that
# takes 30 s answers nothing useful. The coordinator has no bound: without it no commit can be made.
NODE_TIMEOUT_S = 30.0
# Groups a database's lane holds while its commits are under way; one more fails at once.
LANE_GROUPS = 64
# How long a node's commit cancelled at its bound may take to end (psycopg's own cancellation waits up
# to 5 s for the server's cancel and 5 s more for the query to end) before the lane gives up on it.
CANCEL_GRACE_S = 15.0


@dataclass(slots=True)
class SampleRow:
    """One host's metric interval: totals, parallel arrays of block counts (with, per block, whether its
    samples were the idle task's; a block seen in both contexts has one entry each way), and the
    per-instruction counts as parallel arrays that name their block by its 1-based position."""

    host_id: str
    ts: datetime
    interval_ms: int
    totals: tuple[int, int, int, int, int, int]  # total, user, unmapped, lost, dropped, idle
    function_ids: Sequence[int]
    block_offsets: Sequence[int]
    counts: Sequence[int]
    idles: Sequence[bool] | None = None  # None: no block is idle
    insn_index: Sequence[int] = ()
    insn_offsets: Sequence[int] = ()
    insn_counts: Sequence[int] = ()
    idle_by_context: bool = False
    stack_samples: int = 0
    stack_dropped: int = 0


@dataclass(slots=True)
class PointRow:
    """One measurement's interval: the rows with values and their SLOTS-wide values."""

    host_id: str
    measurement_id: str
    ts: datetime
    seconds: float
    state: int
    resources: Sequence[int]
    vals: Sequence[float | None]
    # The interval's edge counts (app.protocol.measured_edges), as parallel columns: function row, from and to
    # block offsets (-1: none), EdgeKind, EdgeLabel, count.
    edges: tuple[Sequence[int], Sequence[int], Sequence[int], Sequence[int], Sequence[int], Sequence[int]] = (
        (),
        (),
        (),
        (),
        (),
        (),
    )


@dataclass(slots=True)
class MeasurementUpdate:
    """What a batch tells about its measurement's state."""

    measurement_id: str
    state: str
    detail: str
    last_ts: datetime
    ended: bool


@dataclass
class Item:
    host_id: str
    samples: SampleRow | None = None
    points: PointRow | None = None
    mark: tuple[str, int] | None = None
    gaps: list[dict[str, Any]] = field(default_factory=list)
    refused: bool = False
    clock_offset_ms: int | None = None
    measurement: MeasurementUpdate | None = None
    # A measurement interval refused for its content: (measurement id, reason), counted on the measurement.
    refused_interval: tuple[str, str] | None = None
    stacks: BatchStacks | None = None  # the call stacks of the samples' interval
    future: asyncio.Future[None] | None = None
    # The stream the item came from: once one of its items fails (guard.store_failed), its later ones
    # fail too without being stored, so a cumulative acknowledgement never skips a lost message.
    guard: Any = None

    def size(self) -> int:
        n = 1
        if self.samples is not None:
            n += len(self.samples.counts) + len(self.samples.insn_counts)
        if self.stacks is not None:
            n += len(self.stacks.rows)
        if self.points is not None:
            n += len(self.points.vals) + len(self.points.edges[0])
        return n


@dataclass(slots=True)
class _Lane:
    queue: asyncio.Queue[list[Item]]
    task: asyncio.Task[None]


def _without_doomed(items: list[Item]) -> list[Item]:
    """The items whose stream has not lost an earlier message; the others fail without being stored."""
    doomed = [it for it in items if getattr(it.guard, "store_failed", False)]
    if not doomed:
        return items
    for it in doomed:
        if it.future is not None and not it.future.done():
            it.future.set_exception(ConnectionError("an earlier message of this stream was not stored"))
    return [it for it in items if not getattr(it.guard, "store_failed", False)]


class IngestWriter:
    def __init__(
        self,
        engine: AsyncEngine,
        queue_items: int = 20_000,
        on_commit: Callable[[list[Item], float], None] | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        nodes: Nodes | None = None,
        node_timeout_s: float = NODE_TIMEOUT_S,
    ) -> None:
        self.engine = engine
        self.nodes = nodes  # the databases the series are spread over (app.storage.nodes); None: this one
        self.node_timeout_s = node_timeout_s
        self._lanes: dict[int, _Lane] = {}  # with nodes: each database's lane, by its index (0: coordinator)
        self._left: dict[int, asyncio.Future[None]] = {}  # a node's commit given up on, still running
        self.queue: asyncio.Queue[Item] = asyncio.Queue(maxsize=queue_items)
        self.on_commit = on_commit  # callback(items, seconds) after each commit, for metrics
        self.on_failure = on_failure  # callback(error) after each failed commit, for metrics
        self._task: asyncio.Task[None] | None = None
        self.commits = 0
        self.points = 0
        # Since when (monotonic) commits fail, None while they succeed; failed commits since then.
        self.failing_since: float | None = None
        self.failed_commits = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ingest-writer")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        stopping = ConnectionError("the backend is stopping")
        for lane in self._lanes.values():
            await cancel_and_wait(lane.task)
            while not lane.queue.empty():
                self._fail(lane.queue.get_nowait(), stopping)
        self._lanes.clear()
        for commit in self._left.values():
            commit.cancel()
        self._left.clear()
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item.future is not None and not item.future.done():
                item.future.set_exception(stopping)

    async def submit(self, item: Item) -> asyncio.Future[None]:
        """Queue an item (waits while the queue is full); its future completes once it is stored."""
        item.future = asyncio.get_running_loop().create_future()
        await self.queue.put(item)
        return item.future

    async def write(self, item: Item) -> None:
        """Queue an item and wait until it is stored."""
        await (await self.submit(item))

    async def drain(self) -> None:
        """Wait until everything queued so far is stored (or failed)."""
        marker = Item(host_id="")
        fut = await self.submit(marker)
        try:
            await fut
        except Exception:  # noqa: BLE001, S110 - a failed commit is its items' business
            pass
        # With nodes, the writer has handed everything before the marker to the lanes: a marker through
        # each of them (in order behind what they hold) completes once they have committed it.
        markers: list[asyncio.Future[None]] = []
        for lane in list(self._lanes.values()):
            done = asyncio.get_running_loop().create_future()
            await lane.queue.put([Item(host_id="", future=done)])
            markers.append(done)
        await asyncio.gather(*markers, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            first = await self.queue.get()
            items, points = [first], first.size()
            deadline = time.monotonic() + GATHER_S
            while len(items) < MAX_ITEMS_PER_COMMIT and points < MAX_POINTS_PER_COMMIT:
                try:
                    item = self.queue.get_nowait()
                except asyncio.QueueEmpty:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        item = await asyncio.wait_for(self.queue.get(), left)
                    except TimeoutError:
                        break
                items.append(item)
                points += item.size()
            items = _without_doomed(items)
            try:
                groups = await self._route(items)
            except asyncio.CancelledError:
                self._fail(items, ConnectionError("the backend is stopping"))
                raise
            except Exception as exc:  # noqa: BLE001 - every item learns; their streams end and resend
                self._failed(exc, len(items))
                self._fail(items, exc)
                continue
            if self.nodes is None:
                for node, group in groups:
                    await self._store(node, group)
                continue
            for node, group in groups:
                self._hand(node, group)

    def _hand(self, node: Node | None, group: list[Item]) -> None:
        """Give one database's group to its lane (made on first use); a lane that holds LANE_GROUPS already
        (its database does not keep up, or hangs) fails the group at once, so the writer never waits on it."""
        index = node.index if node is not None else 0
        lane = self._lanes.get(index)
        if lane is None:
            queue: asyncio.Queue[list[Item]] = asyncio.Queue(maxsize=LANE_GROUPS)
            task = asyncio.create_task(self._lane(node, queue), name=f"ingest-writer-{index}")
            lane = self._lanes[index] = _Lane(queue, task)
        try:
            lane.queue.put_nowait(group)
        except asyncio.QueueFull:
            name = node.label if node is not None else "the coordinator"
            exc = ConnectionError(f"database {name} has {LANE_GROUPS} commits waiting; it does not keep up")
            self._failed(exc, len(group))
            self._fail(group, exc)

    async def _lane(self, node: Node | None, queue: asyncio.Queue[list[Item]]) -> None:
        """One database's commits, in the order they were handed over. While a commit given up on has not
        ended (its node does not answer even its cancellation), the groups after it fail at once: none may
        commit beside it (a resend stored beside the batch it resends would be stored twice)."""
        index = node.index if node is not None else 0
        while True:
            group = _without_doomed(await queue.get())
            if not group:
                continue
            left = self._left.get(index)
            if left is not None and not left.done():
                assert node is not None
                exc = ConnectionError(f"database {node.label} has not ended a commit given up on")
                self._failed(exc, len(group))
                self._fail(group, exc)
                continue
            await self._store(node, group)

    async def _commit_bounded(self, node: Node, items: list[Item]) -> None:
        """A node's commit, failed after `node_timeout_s`. It runs as a task of its own, cancelled at the
        bound; should its cancellation not end it either (psycopg bounds its own, but SQLAlchemy's clean-up
        awaits the connection again), it is left behind, and its lane takes nothing more until it ends."""
        commit = asyncio.ensure_future(self._commit_tries(node, items))
        try:
            done, _ = await asyncio.wait({commit}, timeout=self.node_timeout_s)
            if done:
                commit.result()
                return
            commit.cancel()
            done, _ = await asyncio.wait({commit}, timeout=CANCEL_GRACE_S)
        except asyncio.CancelledError:
            commit.cancel()
            raise
        if not done:
            commit.add_done_callback(lambda t: t.cancelled() or t.exception())  # its end is no one's business
            self._left[node.index] = commit
            log.warning("database %s: a commit given up on does not end; its hosts fail until it does", node.label)
        raise ConnectionError(f"database {node.label} did not commit within {self.node_timeout_s:g} s")

    async def _commit_tries(self, node: Node | None, items: list[Item]) -> None:
        try:
            await self._commit_on(node, items)
        except (DBAPIError, psycopg.Error) as exc:
            # COPY runs on the driver's connection: its errors arrive unwrapped.
            state = getattr(getattr(exc, "orig", exc), "sqlstate", None)
            if state != "23514" or not await self._add_partitions(items, node):
                raise
            await self._commit_on(node, items)  # the partition a row needed was missing: once more

    async def _route(self, items: list[Item]) -> list[tuple[Node | None, list[Item]]]:
        """The items by the database their host's series live on (one group, the coordinator's, without
        nodes): each group is committed on its own, so a node that is down fails its hosts' items only."""
        if self.nodes is None:
            return [(None, items)]
        placed = await self.nodes.place([it.host_id for it in items if it.host_id])
        by_node: dict[int, list[Item]] = {}
        for it in items:
            by_node.setdefault(placed.get(it.host_id, 0), []).append(it)
        return [(self.nodes.node(i) if i else None, group) for i, group in sorted(by_node.items())]

    def _fail(self, items: list[Item], exc: BaseException) -> None:
        for it in items:
            if it.guard is not None:
                it.guard.store_failed = True
            if it.future is not None and not it.future.done():
                it.future.set_exception(exc)

    async def _store(self, node: Node | None, items: list[Item]) -> None:
        """Commit one database's items and complete their futures (an error fails every one of them)."""
        t0 = time.perf_counter()
        points = sum(it.size() for it in items)
        try:
            if node is None:
                await self._commit_tries(None, items)
            else:
                await self._commit_bounded(node, items)
        except asyncio.CancelledError:
            for it in items:
                if it.future is not None and not it.future.done():
                    it.future.set_exception(ConnectionError("the backend is stopping"))
            raise
        except Exception as exc:  # noqa: BLE001 - every item learns; their streams end and resend
            if node is not None:
                log.warning("storing on database %s failed", node.label)
            self._failed(exc, len(items))
            self._fail(items, exc)
            return
        self.commits += 1
        self.points += points - len(items)
        if self.failing_since is not None and any(it.host_id for it in items):
            log.warning(
                "storing the agents' data again, after %d failed commit(s) in %.0f s",
                self.failed_commits,
                time.monotonic() - self.failing_since,
            )
            self.failing_since, self.failed_commits = None, 0
        for it in items:
            if it.future is not None and not it.future.done():
                it.future.set_result(None)
        if self.on_commit is not None:
            self.on_commit(items, time.perf_counter() - t0)

    @property
    def failing(self) -> bool:
        """The last commit that wrote data failed (the database refuses writes or does not answer)."""
        return self.failing_since is not None

    def _failed(self, exc: BaseException, count: int) -> None:
        """Log a failed commit: an error with the database's reason when commits start failing, a warning
        for each."""
        self.failed_commits += 1
        if self.failing_since is None:
            self.failing_since = time.monotonic()
            log.error(
                "the database does not store the agents' data (%s); their streams end with UNAVAILABLE and the "
                "agents keep it and send it again until it is stored",
                describe_error(exc),
            )
        log.warning("storing %d data message(s) failed: %s", count, type(exc).__name__)
        if self.on_failure is not None:
            self.on_failure(exc)

    async def _add_partitions(self, items: list[Item], node: Node | None = None) -> bool:
        """Create the partitions the items' times need (a retention pass with a shorter retention, or
        a clock far off, can leave one missing); False if there is nothing to create."""
        times = [it.samples.ts for it in items if it.samples is not None] + [
            it.points.ts for it in items if it.points is not None
        ]
        if not times:
            return False
        now = datetime.now(UTC)
        back = max(now - min(times), timedelta(0)) + timedelta(hours=1)
        ahead = max(max(times) - now, timedelta(0)) + timedelta(hours=1)
        created = await partitions.ensure(
            node.engine if node is not None else self.engine,
            now,
            back,
            timedelta(days=1) + back,
            raw_ahead=ahead + timedelta(hours=3),
            rollup_ahead=ahead + timedelta(days=2),
        )
        log.debug("partitions for %s..%s: %d created", min(times), max(times), created)
        return created > 0

    async def _commit_on(self, node: Node | None, items: list[Item]) -> None:
        if node is None:
            await self._commit(items)  # one database: called as before nodes (tests slow it down by replacing it)
        else:
            await self._commit(items, node)

    async def _commit(self, items: list[Item], node: Node | None = None) -> None:
        """Store the items in one transaction; with their hosts on a node (`node`), their series and delivery
        marks in one transaction on the node, then what the coordinator keeps of them (gaps, presence,
        measurement states) in one there: the batch is acknowledged once both committed, and a resend after
        a failure between them is recognised by the node's delivery mark."""
        work = [it for it in items if it.host_id]
        if not work:
            return
        if node is None:
            async with self.engine.begin() as conn:
                await self._write_series(conn, items, work)
                await self._write_state(conn, work)
            return
        async with node.engine.begin() as conn:
            await self._write_series(conn, items, work, on_node=True)
        async with self.engine.begin() as conn:
            await self._write_state(conn, work)

    async def _write_series(
        self, conn: AsyncConnection, items: list[Item], work: list[Item], on_node: bool = False
    ) -> None:
        """The series rows, their late rollup additions and the delivery marks, on the hosts' database (a node's
        `on_node`: the hosts' kernel-build groups its late stacks are summed by are read from the coordinator)."""
        sample_rows = [it.samples for it in items if it.samples is not None]
        point_rows = [it.points for it in items if it.points is not None]
        batch = 0
        if sample_rows or point_rows:
            wm_1m, wm_1h = await rollups.watermarks(conn, for_share=True)
            batch = (await conn.execute(text("SELECT nextval('series_batch_seq')"))).scalar_one()
            raw = await conn.get_raw_connection()
            driver = raw.driver_connection
            assert driver is not None
            async with driver.cursor() as cur:
                # Rows are written as COPY text built by joins (app.storage.series.copytext), one write per table.
                if sample_rows:
                    async with cur.copy(
                        "COPY sample_intervals (host_id, ts, interval_ms, total_samples, user_samples, "
                        "unmapped_samples, lost_samples, dropped_samples, idle_samples, idle_by_context, "
                        "stack_samples, stack_dropped_samples, function_ids, block_offsets, counts, idles, "
                        "insn_index, insn_offsets, insn_counts, batch) FROM STDIN"
                    ) as copy:
                        await copy.write(
                            "".join(
                                copytext.row(
                                    (
                                        copytext.field(s.host_id),
                                        copytext.ts(s.ts),
                                        str(s.interval_ms),
                                        *map(str, s.totals),
                                        "t" if s.idle_by_context else "f",
                                        str(s.stack_samples),
                                        str(s.stack_dropped),
                                        copytext.ints(s.function_ids),
                                        copytext.ints(s.block_offsets),
                                        copytext.ints(s.counts),
                                        copytext.bools(s.idles)
                                        if s.idles is not None
                                        else copytext.bools([False] * len(s.counts)),
                                        copytext.ints(s.insn_index),
                                        copytext.ints(s.insn_offsets),
                                        copytext.ints(s.insn_counts),
                                        str(batch),
                                    )
                                )
                                for s in sample_rows
                            ).encode()
                        )
                if point_rows:
                    async with cur.copy(
                        "COPY measurement_points (host_id, measurement_id, ts, seconds, state, resources, "
                        "vals, edge_rows, edge_from, edge_to, edge_kinds, edge_labels, edge_counts, "
                        "batch) FROM STDIN"
                    ) as copy:
                        await copy.write(
                            "".join(
                                copytext.row(
                                    (
                                        copytext.field(p.host_id),
                                        copytext.field(p.measurement_id),
                                        copytext.ts(p.ts),
                                        repr(float(p.seconds)),
                                        str(p.state),
                                        copytext.ints(p.resources),
                                        copytext.floats(p.vals),
                                        *map(copytext.ints, p.edges),
                                        str(batch),
                                    )
                                )
                                for p in point_rows
                            ).encode()
                        )
            stacked = [
                (it.host_id, it.samples.ts, it.stacks)
                for it in items
                if it.stacks is not None and it.samples is not None
            ]
            if stacked:
                await stack_store.write_many(conn, stacked)
                groups = None
                if on_node and any(ts < wm_1m for _h, ts, _s in stacked):
                    groups = await rollups.coordinator_groups(self.engine, sorted({h for h, _ts, _s in stacked}))
                await stack_store.add_late(conn, stacked, wm_1m, groups)
            late = [
                rollups.LateInterval(
                    s.host_id,
                    s.ts,
                    s.interval_ms,
                    (*s.totals, s.stack_samples, s.stack_dropped),
                    s.function_ids,
                    s.block_offsets,
                    s.counts,
                    s.idles,
                )
                for s in sample_rows
                if s.ts < wm_1m
            ]
            if late:
                await rollups.add_late_samples(conn, late, wm_1m, wm_1h)
            late_points = [(p.measurement_id, p.ts) for p in point_rows if p.ts < wm_1m]
            if late_points:
                await rollups.add_late_points(conn, batch, late_points, wm_1m, wm_1h)
        marks: dict[tuple[str, str], int] = {}
        for it in work:
            if it.mark is not None:
                key = (it.host_id, it.mark[0])
                marks[key] = max(marks.get(key, 0), it.mark[1])
        if marks:
            keys = list(marks)
            await conn.execute(
                text("""
                INSERT INTO delivery_marks (host_id, instance_id, seq, updated_at)
                SELECT h, i, s, now() FROM unnest(CAST(:h AS text[]), CAST(:i AS text[]), CAST(:s AS bigint[]))
                    AS u(h, i, s)
                ON CONFLICT (host_id, instance_id) DO UPDATE
                SET seq = greatest(delivery_marks.seq, excluded.seq), updated_at = now()"""),
                {"h": [k[0] for k in keys], "i": [k[1] for k in keys], "s": [marks[k] for k in keys]},
            )

    async def _write_state(self, conn: AsyncConnection, work: list[Item]) -> None:
        """What the coordinator keeps of the items: gaps, refusals, host presence, measurement states."""
        gaps = [(it.host_id, g) for it in work for g in it.gaps]
        if gaps:
            await conn.execute(
                text("""
                INSERT INTO data_gaps (host_id, start_ts, end_ts, instance_id, first_seq, messages, reason, source)
                VALUES (:h, :s, :e, :i, :f, :m, :r, :src)"""),
                [
                    {
                        "h": h,
                        "s": g["start"],
                        "e": g["end"],
                        "i": g["instance"],
                        "f": g["first_seq"],
                        "m": g["messages"],
                        "r": g["reason"][:1024],
                        "src": g["source"],
                    }
                    for h, g in gaps
                ],
            )
        for it in work:
            if it.refused:
                await conn.execute(
                    text("""
                    UPDATE hosts SET refused_batches = refused_batches + 1, last_seen = now(),
                      clock_offset_ms = coalesce(:o, clock_offset_ms),
                      clock_checked_at = CASE WHEN :o IS NULL THEN clock_checked_at ELSE now() END
                    WHERE id = :h"""),
                    {"h": it.host_id, "o": it.clock_offset_ms},
                )
        seen = sorted({it.host_id for it in work if not it.refused})
        if seen:
            await conn.execute(text("UPDATE hosts SET last_seen = now() WHERE id = ANY(:h)"), {"h": seen})
        refusals = [(it.host_id, it.refused_interval) for it in work if it.refused_interval is not None]
        if refusals:
            await conn.execute(
                text("""
                UPDATE measurements SET refused_intervals = refused_intervals + 1, refusal = :r
                WHERE id = :m AND host_id = :h"""),
                [{"h": h, "m": m, "r": r[:1024]} for h, (m, r) in refusals],
            )
        updates: dict[str, MeasurementUpdate] = {}
        for it in work:
            if it.measurement is not None:
                m = it.measurement
                have = updates.get(m.measurement_id)
                if have is None or have.last_ts <= m.last_ts or m.ended:
                    updates[m.measurement_id] = m
        if updates:
            await conn.execute(
                text("""
                UPDATE measurements SET
                  state = CASE WHEN state IN ('target_exited', 'stopped', 'failed') AND NOT :ended
                               THEN state ELSE :state END,
                  detail = CASE WHEN :ended OR :detail <> '' THEN :detail ELSE detail END,
                  last_ts = greatest(last_ts, :ts),
                  started_at = coalesce(started_at, :ts),
                  ended_at = CASE WHEN :ended THEN coalesce(ended_at, now()) ELSE ended_at END
                WHERE id = :id"""),
                [
                    {
                        "id": m.measurement_id,
                        "state": m.state,
                        "detail": m.detail,
                        "ts": m.last_ts,
                        "ended": m.ended,
                    }
                    for m in updates.values()
                ],
            )
