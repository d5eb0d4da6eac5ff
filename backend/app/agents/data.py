# SPDX-License-Identifier: Apache-2.0
"""Data messages (MetricBatch, MeasurementBatch, DataGap): checked, mapped to the series' rows, handed to
the ingest writer and acknowledged once stored, at most once per (instance, seq).
"""

import asyncio
import logging
from collections import Counter
from typing import Any

import grpc
from sqlalchemy import text

from app.agents.clock import ClockChecks, ns_to_dt
from app.domain.sessions import AgentSession, end_session
from app.protocol import agent_input, measured_edges
from app.protocol.agent_input import InvalidInput
from app.protocol.proto import pb
from app.protocol.stack_defs import BatchStacks
from app.storage import delivery_marks, measurements, samples, stacks
from app.storage.series.layout import NSLOTS, SLOT

log = logging.getLogger("hotpath.agents")


# MetricValue.metric -> its slot in the series (concurrency and per-call values are derived, not stored).
_METRIC_SLOT = {
    pb.METRIC_COUNT: SLOT["count"],
    pb.METRIC_WALL_NS: SLOT["wall_ns"],
    pb.METRIC_VTIME_NS: SLOT["vtime_ns"],
    pb.METRIC_CYCLES: SLOT["cycles"],
    pb.METRIC_INSTRUCTIONS: SLOT["instructions"],
    pb.METRIC_ICACHE_STALL: SLOT["icache_stall"],
    pb.METRIC_BRANCH_MISPREDICT: SLOT["branch_mispredict"],
}


class DataMapping(ClockChecks):
    async def _on_data(self, session: AgentSession, message: "pb.AgentMessage", kind: str) -> None:
        instance = message.instance_id or session.instance_id
        if instance and not agent_input.INSTANCE_RE.match(instance):
            raise InvalidInput("AgentMessage.instance_id must be 1 to 64 letters, digits, '-' or '_'")
        seq = message.seq
        if seq and not instance:
            raise InvalidInput("a numbered message needs an instance id (Hello.instance_id)")
        parsed_stacks = None
        if kind == "gap":
            if not seq:
                raise InvalidInput("a DataGap must carry a sequence number")
            agent_input.check_gap(message.gap, seq)
        elif kind == "metrics":
            agent_input.check_batch(message.metrics)
            if message.metrics.HasField("stacks"):
                # Checking a batch's stacks (every frame, every stack id rehashed) is the heaviest part of
                # ingest: in a worker thread, so the event loop keeps serving the API and the other
                # streams meanwhile (a read loop's kernel stacks held it for seconds at a time).
                parsed_stacks = await asyncio.to_thread(
                    agent_input.check_stacks, message.metrics.stacks, message.metrics.total_samples
                )
        mark = 0
        if seq:
            if instance not in session.marks:
                session.marks[instance] = await delivery_marks.of_instance(
                    self.runtime.engine, session.host_id, instance
                )
            mark = session.marks[instance]
            if seq <= mark:
                await session.send(pb.ServerMessage(ack=pb.Ack(instance_id=instance, seq=mark)))
                return  # stored before: a resend after a reconnect
        gaps: list[dict[str, Any]] = []
        covered_from = message.gap.first_seq if kind == "gap" else seq
        if seq and covered_from > mark + 1:
            # Sequence numbers the agent neither sent nor reported as dropped.
            start = session.last_end.get(instance)
            end = ns_to_dt(
                message.gap.start_unix_ns
                if kind == "gap"
                else message.metrics.interval_start_unix_ns
                if kind == "metrics"
                else message.measurement.interval_start_unix_ns
            )
            gaps.append(
                dict(
                    start=min(start or end, end),
                    end=end,
                    instance=instance,
                    first_seq=mark + 1,
                    messages=covered_from - mark - 1,
                    source="backend",
                    reason=f"sequence numbers {mark + 1}..{covered_from - 1} never arrived",
                )
            )
        item = samples.Item(host_id=session.host_id, mark=(instance, seq) if seq else None, gaps=gaps, guard=session)
        if kind == "gap":
            g = message.gap
            gaps.append(
                dict(
                    start=ns_to_dt(g.start_unix_ns),
                    end=ns_to_dt(max(g.end_unix_ns, g.start_unix_ns)),
                    instance=instance,
                    first_seq=g.first_seq,
                    messages=g.messages,
                    source="agent",
                    reason=g.reason or "dropped by the agent",
                )
            )
            for gap in gaps:
                gap["start"], gap["end"] = self._clamp(gap["start"]), self._clamp(gap["end"])
        elif kind == "metrics":
            await self._map_metrics(session, message.metrics, instance, seq, item, parsed_stacks)
        else:
            await self._map_measurement(session, message.measurement, instance, seq, item)
        if seq:
            session.marks[instance] = seq
        future = await self.runtime.writer.submit(item)
        session.last_stored = future
        future.add_done_callback(lambda f: self._stored(session, item, instance, seq, f))

    def _stored(
        self, session: AgentSession, item: "samples.Item", instance: str, seq: int, future: asyncio.Future[None]
    ) -> None:
        """A data message was stored (or not): acknowledge it, publish what views want to see."""
        if future.cancelled() or future.exception() is not None:
            session.store_failed = True  # nothing after it may be acknowledged
            session.known_stacks.clear()  # definitions it carried may not be stored
            if not session.ending:
                session.ending = True
                exc = None if future.cancelled() else future.exception()
                log.warning(
                    "host %s: a data message could not be stored (%s); ending the stream",
                    session.host_id,
                    type(exc).__name__ if exc else "cancelled",
                )
                task = asyncio.get_running_loop().create_task(
                    end_session(
                        session, grpc.StatusCode.UNAVAILABLE, "the backend cannot reach its database; try again"
                    )
                )
                self.registry.cleanups.add(task)
                task.add_done_callback(self.registry.cleanups.discard)
            return
        if session.store_failed or session.closed:
            return
        task = asyncio.get_running_loop().create_task(self._after_store(session, item, instance, seq))
        self.registry.cleanups.add(task)
        task.add_done_callback(self.registry.cleanups.discard)

    async def _after_store(self, session: AgentSession, item: "samples.Item", instance: str, seq: int) -> None:
        try:
            if seq:
                await session.send(pb.ServerMessage(ack=pb.Ack(instance_id=instance, seq=seq)))
        except Exception:  # noqa: BLE001, S110 - the stream ended: the agent resends, stored once
            return
        hub = self.runtime.hub
        topic = f"host:{session.host_id}"
        if item.samples is not None and hub.wants(topic):
            s = item.samples
            per_fn: Counter[int] = Counter()
            for fid, count in zip(s.function_ids, s.counts, strict=True):
                per_fn[fid] += count
            top = per_fn.most_common(20)
            names = await self.registry.names([fid for fid, _ in top])
            hub.publish(
                topic,
                {
                    "type": "samples",
                    "host_id": session.host_id,
                    "interval_start": s.ts,
                    "total_samples": s.totals[0],
                    "top": [{"function_id": fid, "name": names.get(fid, ""), "samples": c} for fid, c in top],
                },
            )
        if item.points is not None:
            m = item.measurement
            assert m is not None
            hub.publish(
                f"measurement:{item.points.measurement_id}",
                {
                    "type": "measurement",
                    "measurement_id": item.points.measurement_id,
                    "host_id": session.host_id,
                    "interval_start": item.points.ts,
                    "state": m.state,
                },
            )
            if m.ended:
                hub.publish(topic, {"type": "targets", "host_id": session.host_id})
        if item.gaps:
            hub.publish(topic, {"type": "gap", "host_id": session.host_id})

    async def _check_stack_frames(self, session: AgentSession, parsed: BatchStacks) -> None:
        """Kernel frames must name functions of catalog pieces this host runs (or a stored piece), within
        the function's bytes when the piece is stored."""
        counts: dict[str, int] = {}
        for _, modules, flat in parsed.defs:
            for k in range(0, len(flat), 3):
                kind, digest, _ = modules[flat[k]]
                if kind != stacks.KERNEL_FUNCTION:
                    continue
                if digest not in counts:
                    ref = session.refs.get(digest)
                    if ref is not None:
                        counts[digest] = ref.function_count
                    else:
                        async with self.runtime.engine.connect() as conn:
                            found = (
                                await conn.execute(
                                    text("SELECT function_count FROM catalog_pieces WHERE digest = :d AND complete"),
                                    {"d": digest},
                                )
                            ).scalar_one_or_none()
                        if found is None:
                            raise InvalidInput(
                                f"a stack frame names catalog {digest[:16]}, which this host does "
                                "not run and no host has sent"
                            )
                        counts[digest] = found
                fn, off = flat[k + 1], flat[k + 2]
                if fn >= counts[digest]:
                    raise InvalidInput(
                        f"a stack frame names function {fn} of catalog {digest[:16]}, which has {counts[digest]}"
                    )
                mapping = await self.registry.function_ids(digest)
                entry = mapping.get(fn) if mapping is not None else None
                if entry is not None and off > entry[1]:
                    raise InvalidInput(
                        f"a stack frame at offset {off:#x} of function {fn}, which is {entry[1]:#x} bytes long"
                    )

    async def _map_metrics(
        self,
        session: AgentSession,
        batch: "pb.MetricBatch",
        instance: str,
        seq: int,
        item: "samples.Item",
        parsed_stacks: BatchStacks | None = None,
    ) -> None:
        """Check a metric batch against what Hello announced and map it to function ids."""
        start_ns = batch.interval_start_unix_ns
        end_ns = start_ns + batch.interval_ms * 1_000_000
        if self._refuse_if_out_of_time(session, start_ns, end_ns, instance, seq, item):
            return
        digests = session.kernel_digests
        maps: list[dict[int, tuple[int, int]] | None] = []
        idle_sets: list[set[int]] = []
        for digest in digests:
            maps.append(await self.registry.function_ids(digest))
            idle_sets.append(self.registry.idle_ids.get(digest, set()))
        counts_of = [session.refs[d].function_count for d in digests]
        # Block entries in arrival order; a key seen again (another entry of the same block and context)
        # adds to its position, and then its instruction counts are merged (rare: agents send one each).
        position: dict[tuple[int, int, bool], int] = {}
        function_ids: list[int] = []
        block_offsets: list[int] = []
        counts: list[int] = []
        idles: list[bool] = []
        insns: list[tuple[int, Any, Any]] = []  # (position, offsets, counts)
        merged = False
        dropped = 0
        nmods = len(digests)
        by_context = batch.idle_by_context
        for b in batch.blocks:
            mi = b.module_index
            if mi >= nmods:
                raise InvalidInput(f"samples for module {mi}, which Hello did not list ({nmods} modules)")
            fi = b.function_index
            if fi >= counts_of[mi]:
                raise InvalidInput(f"samples for function {fi} of module {mi}, which has {counts_of[mi]}")
            mapping = maps[mi]
            entry = mapping.get(fi) if mapping is not None else None
            if entry is None:
                dropped += b.count  # the piece is not stored yet
                continue
            off = b.block_offset
            size = entry[1]
            if off >= max(size, 1):
                raise InvalidInput(f"samples for block offset {off:#x} of function {fi}, which is {size:#x} bytes long")
            # An agent that does not report context: the idle loop by name.
            idle = b.idle if by_context else fi in idle_sets[mi]
            key = (entry[0], off, idle)
            pos = position.get(key)
            if pos is None:
                pos = position[key] = len(counts)
                function_ids.append(entry[0])
                block_offsets.append(off)
                counts.append(b.count)
                idles.append(idle)
            else:
                counts[pos] += b.count
                merged = True
            ioffs = b.instruction_offsets
            if ioffs:
                if off + ioffs[-1] >= size:
                    raise InvalidInput(f"instruction samples past the end of function {fi}")
                insns.append((pos, ioffs, b.instruction_counts))
        stack_samples = stack_dropped = 0
        if parsed_stacks is not None:
            await self._check_stack_frames(session, parsed_stacks)
            stack_samples, stack_dropped = batch.stacks.stack_samples, batch.stacks.dropped_samples
            defined = {d[0] for d in parsed_stacks.defs}
            unknown = [r[0] for r in parsed_stacks.rows if r[0] not in defined and r[0] not in session.known_stacks]
            if unknown:
                async with self.runtime.engine.connect() as conn:
                    found = await stacks.known_ids(conn, session.host_id, unknown)
                session.known_stacks |= found
                missing = set(unknown) - found
                if missing:
                    # Stacks whose definition this host never sent (or the backend forgot): counted, not stored.
                    lost = sum(r[1] for r in parsed_stacks.rows if r[0] in missing)
                    parsed_stacks.rows = [r for r in parsed_stacks.rows if r[0] not in missing]
                    stack_samples -= lost
                    stack_dropped += lost
                    log.warning(
                        "host %s: %d samples of %d undefined stack(s) not stored", session.host_id, lost, len(missing)
                    )
        session.dropped_samples += dropped
        metrics = self.runtime.metrics
        metrics.ingest_batches.inc()
        metrics.ingest_samples.inc(batch.total_samples)
        metrics.ingest_dropped.inc(dropped)
        metrics.ingest_points.inc(len(counts))
        insn_index: list[int] = []
        insn_offsets: list[int] = []
        insn_counts: list[int] = []
        if merged and insns:
            per_pc: dict[int, Counter[int]] = {}
            for pos, ioffs, icounts in insns:
                c = per_pc.setdefault(pos, Counter())
                for o, n in zip(ioffs, icounts, strict=True):
                    c[o] += n
            insns = [(pos, sorted(c), [c[o] for o in sorted(c)]) for pos, c in sorted(per_pc.items())]
        for pos, ioffs, icounts in insns:  # positions are 1-based in the stored arrays
            insn_index.extend([pos + 1] * len(ioffs))
            insn_offsets.extend(ioffs)
            insn_counts.extend(icounts)
        idle_samples = batch.idle_samples if by_context else sum(c for c, i in zip(counts, idles, strict=True) if i)
        item.samples = samples.SampleRow(
            host_id=session.host_id,
            ts=ns_to_dt(start_ns),
            interval_ms=batch.interval_ms,
            totals=(
                batch.total_samples,
                batch.user_samples,
                batch.unmapped_samples,
                batch.lost_samples,
                dropped,
                idle_samples,
            ),
            idle_by_context=batch.idle_by_context,
            stack_samples=stack_samples,
            stack_dropped=stack_dropped,
            function_ids=function_ids,
            block_offsets=block_offsets,
            counts=counts,
            idles=idles,
            insn_index=insn_index,
            insn_offsets=insn_offsets,
            insn_counts=insn_counts,
        )
        if parsed_stacks is not None and (parsed_stacks.defs or parsed_stacks.rows):
            item.stacks = parsed_stacks
            # Known from now on: items are stored in order, and when one fails the stream ends and
            # forgets what it knew (see _stored), so a later batch may refer to these definitions.
            if len(session.known_stacks) > 500_000:
                session.known_stacks.clear()
            session.known_stacks |= {d[0] for d in parsed_stacks.defs}
        session.last_end[instance] = ns_to_dt(end_ns)

    def _refuse_interval(
        self, batch: "pb.MeasurementBatch", instance: str, seq: int, item: "samples.Item", why: str
    ) -> None:
        """Record a measurement interval refused alone as a backend gap at its start, with the reason."""
        at = self._clamp(ns_to_dt(batch.interval_start_unix_ns))
        item.gaps.append(
            dict(
                start=at,
                end=at,
                instance=instance,
                first_seq=seq,
                messages=1,
                source="backend",
                reason=f"refused: {why}",
            )
        )

    async def _map_measurement(
        self, session: AgentSession, batch: "pb.MeasurementBatch", instance: str, seq: int, item: "samples.Item"
    ) -> None:
        """Check a measurement batch against its measurement's rows and turn it into one points row."""
        mid = batch.measurement_id
        if not agent_input.MEASUREMENT_ID_RE.match(mid):
            raise InvalidInput("MeasurementBatch.measurement_id must be 1 to 64 letters, digits, '-' or '_'")
        rows = session.measurement_rows.get(mid)
        if rows is None:
            async with self.runtime.engine.connect() as conn:
                rows = await measurements.rows_of(conn, session.host_id, mid)
            if rows is not None:
                session.measurement_rows[mid] = rows
        if rows is None:
            self._refuse_interval(
                batch, instance, seq, item, f"values of measurement {mid[:64]}, which this host does not run"
            )
            return
        edges: tuple[Any, ...] = ((), (), (), (), (), ())
        try:
            agent_input.check_measurement_batch(batch, rows)
            if batch.edges:
                shapes = session.measurement_shapes.get(mid)
                if shapes is None:
                    async with self.runtime.engine.connect() as conn:
                        shapes = await measured_edges.load_shapes(conn, mid)
                    session.measurement_shapes[mid] = shapes
                edges = measured_edges.check_edges(batch, shapes)
        except InvalidInput as exc:
            # Refuse this interval alone: ending the stream would leave the batch unacknowledged, the
            # agent would resend it on every reconnect and the host would stay offline.
            why = str(exc)
            log.warning("host %s: refused an interval of measurement %s (seq %d): %s", session.host_id, mid, seq, why)
            self._refuse_interval(batch, instance, seq, item, why)
            item.refused_interval = (mid, why)
            self.runtime.metrics.ingest_refused_intervals.inc()
            return
        start_ns, end_ns = batch.interval_start_unix_ns, batch.interval_end_unix_ns
        if self._refuse_if_out_of_time(session, start_ns, end_ns, instance, seq, item):
            return
        resources: list[int] = []
        vals: list[float | None] = []
        for rv in batch.resources:
            slot: list[float | None] = [None] * NSLOTS
            for v in rv.values:
                k = _METRIC_SLOT.get(v.metric)
                if k is not None:
                    slot[k] = v.value
            slot[SLOT["exits"]] = float(rv.exits) if rv.exits else None
            slot[SLOT["samples"]] = float(rv.samples) if rv.samples else None
            resources.append(rv.resource)
            vals.extend(slot)
        ts = ns_to_dt(start_ns)
        state = agent_input.MEASUREMENT_STATES[batch.state]
        item.points = samples.PointRow(
            host_id=session.host_id,
            measurement_id=mid,
            ts=ts,
            seconds=(end_ns - start_ns) / 1e9,
            state=batch.state,
            resources=resources,
            vals=vals,
            edges=edges,
        )
        item.measurement = samples.MeasurementUpdate(
            measurement_id=mid, state=state, detail=batch.detail, last_ts=ts, ended=state in measurements.ENDED
        )
        self.runtime.metrics.ingest_points.inc(len(vals))
        session.last_end[instance] = ns_to_dt(end_ns)
