# SPDX-License-Identifier: Apache-2.0
"""Edge counts of measured functions: what an agent may send and what the console reads.

The agent derives each interval's edge counts from the block counts it measured (KernInst section 4)
and sends them in the MeasurementBatch. Nothing in them is taken on trust:
- every edge belongs to a function row of the measurement that was measured with its blocks, and is an
  edge of that function's CFG as the catalog holds it (fallthrough/taken to a successor block, a
  return, tail call or indirect jump out of a block that has one, the entry into the first block, flow
  into a block without a predecessor, the end of a block without successors), listed once;
- the label matches the basis: exact-derived or estimated edges only from exact block counts, sampled
  estimates only from sampled ones;
- with exact block counts, flow is conserved: every measured block's in-edges and out-edges sum to its
  count in the interval (a block row absent from the batch counted 0), within a tolerance for the
  executions in flight when an interval is cut (IN_FLIGHT + 1% of the count).
A batch that breaks any of these is refused: nothing of it is stored; the stream goes on (see
app.agents.service).
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.protocol.agent_input import MAX_COUNT, InvalidInput, excerpt
from app.protocol.proto import pb

EDGE_KINDS = {
    pb.EDGE_KIND_ENTRY: "entry",
    pb.EDGE_KIND_FALLTHROUGH: "fallthrough",
    pb.EDGE_KIND_TAKEN: "taken",
    pb.EDGE_KIND_TAIL_CALL: "tail_call",
    pb.EDGE_KIND_INDIRECT: "indirect",
    pb.EDGE_KIND_RETURN: "return",
    pb.EDGE_KIND_NO_SUCCESSOR: "no_successor",
    pb.EDGE_KIND_INDIRECT_IN: "indirect_in",
}
EDGE_LABELS = {
    pb.EDGE_LABEL_EXACT_DERIVED: "exact_derived",
    pb.EDGE_LABEL_ESTIMATED: "estimated",
    pb.EDGE_LABEL_SAMPLED_ESTIMATE: "sampled_estimate",
}
# Executions that may be inside a block when an interval is cut (threads between a block's probe and
# its successor's), on top of 1% of the block's count.
IN_FLIGHT = 16
NONE = -1  # no from block (entry, indirect_in) or no to block (the edge leaves the function)
_SUCC_EDGE = {
    pb.SUCCESSOR_KIND_FALLTHROUGH: pb.EDGE_KIND_FALLTHROUGH,
    pb.SUCCESSOR_KIND_TAKEN: pb.EDGE_KIND_TAKEN,
    pb.SUCCESSOR_KIND_TAIL_CALL: pb.EDGE_KIND_TAIL_CALL,
    pb.SUCCESSOR_KIND_INDIRECT: pb.EDGE_KIND_INDIRECT,
    pb.SUCCESSOR_KIND_RETURN: pb.EDGE_KIND_RETURN,
}


@dataclass(slots=True)
class FunctionShape:
    """One function row of a measurement: its CFG's edges and its block rows."""

    row: int
    edges: set[tuple[int, int, int]] = field(default_factory=set)  # (EdgeKind, from offset, to offset)
    block_rows: dict[int, int] = field(default_factory=dict)  # block offset -> row
    basis: str = ""  # "exact" or "sampled": how the block rows are counted


def shape_edges(blocks: list[Any]) -> set[tuple[int, int, int]]:
    """The edges a function's CFG allows, from function_code.blocks."""
    out: set[tuple[int, int, int]] = set()
    if not blocks:
        return out
    offsets = {b[0] for b in blocks}
    preds: set[int] = set()
    out.add((pb.EDGE_KIND_ENTRY, NONE, blocks[0][0]))
    for off, _size, _n, succs in blocks:
        if not succs:
            out.add((pb.EDGE_KIND_NO_SUCCESSOR, off, NONE))
        for kind, target, _name in succs:
            ek = _SUCC_EDGE.get(kind)
            if ek in (pb.EDGE_KIND_FALLTHROUGH, pb.EDGE_KIND_TAKEN):
                if target in offsets:
                    out.add((ek, off, int(target)))
                    preds.add(int(target))
            elif ek is not None:
                out.add((ek, off, NONE))
    for off in offsets - preds - {blocks[0][0]}:
        out.add((pb.EDGE_KIND_INDIRECT_IN, NONE, off))
    return out


async def load_shapes(conn: AsyncConnection, measurement_id: str) -> dict[int, FunctionShape]:
    """The function rows of a measurement that have block rows, with their CFGs from the catalog."""
    rows = (
        await conn.execute(
            text("""
        SELECT mr.idx, mr.kind, mr.block_offset, mr.function_row, mr.metrics -> 'count' ->> 'label' AS label,
               CASE WHEN mr.kind = 'function' THEN fc.blocks END AS blocks
        FROM measurement_resources mr
        LEFT JOIN function_code fc ON fc.digest = mr.digest AND fc.index = mr.function_index
        WHERE mr.measurement_id = :m ORDER BY mr.idx"""),
            {"m": measurement_id},
        )
    ).all()
    functions = {r.idx: r for r in rows if r.kind == "function"}
    shapes: dict[int, FunctionShape] = {}
    for r in rows:
        if r.kind != "block" or r.function_row not in functions:
            continue
        fn = functions[r.function_row]
        shape = shapes.get(fn.idx)
        if shape is None:
            shape = shapes[fn.idx] = FunctionShape(row=fn.idx, edges=shape_edges(fn.blocks or []))
        shape.block_rows[r.block_offset] = r.idx
        if r.label in ("exact", "sampled"):
            # Any sampled block row makes the function's edges sampled estimates (as the agent does).
            shape.basis = "sampled" if "sampled" in (shape.basis, r.label) else "exact"
    return shapes


def check_edges(b: "pb.MeasurementBatch", shapes: dict[int, FunctionShape]) -> tuple[list[int], ...]:
    """Check a batch's edges (see the module's rules); return them as the six stored columns."""
    where = f"measurement {excerpt(b.measurement_id)}"
    limit = sum(len(s.edges) for s in shapes.values())
    if len(b.edges) > limit:
        raise InvalidInput(f"{where}: {len(b.edges)} edges; its measured functions have {limit}")
    cols: tuple[list[int], ...] = ([], [], [], [], [], [])
    seen: set[tuple[int, int, int, int]] = set()
    flow: dict[int, dict[int, list[int]]] = {}  # function row -> block offset -> [in, out]
    for e in b.edges:
        shape = shapes.get(e.function_row)
        if shape is None:
            raise InvalidInput(
                f"{where}: edges for row {e.function_row}, which is not a function measured with its blocks"
            )
        if e.kind not in EDGE_KINDS or e.label not in EDGE_LABELS:
            raise InvalidInput(f"{where}: an edge of row {e.function_row} has an unknown kind or label")
        frm = e.from_offset if e.kind not in (pb.EDGE_KIND_ENTRY, pb.EDGE_KIND_INDIRECT_IN) else NONE
        to = (
            e.to_offset
            if e.kind in (pb.EDGE_KIND_ENTRY, pb.EDGE_KIND_FALLTHROUGH, pb.EDGE_KIND_TAKEN, pb.EDGE_KIND_INDIRECT_IN)
            else NONE
        )
        if (e.kind, frm, to) not in shape.edges:
            raise InvalidInput(
                f"{where}: row {e.function_row} has no {EDGE_KINDS[e.kind]} edge {frm:#x} -> {to:#x} in its CFG"
            )
        key = (e.function_row, e.kind, frm, to)
        if key in seen:
            raise InvalidInput(f"{where}: the edge {frm:#x} -> {to:#x} of row {e.function_row} is listed twice")
        seen.add(key)
        if e.count > MAX_COUNT:
            raise InvalidInput(f"{where}: an edge count of row {e.function_row} is out of range")
        sampled = e.label == pb.EDGE_LABEL_SAMPLED_ESTIMATE
        if shape.basis != ("sampled" if sampled else "exact"):
            raise InvalidInput(
                f"{where}: a {EDGE_LABELS[e.label]} edge of row {e.function_row}, whose blocks "
                f"are counted {shape.basis or 'not at all'}"
            )
        if not sampled:
            per = flow.setdefault(e.function_row, {})
            if to != NONE:
                per.setdefault(to, [0, 0])[0] += e.count
            if frm != NONE:
                per.setdefault(frm, [0, 0])[1] += e.count
        for col, v in zip(cols, (e.function_row, frm, to, e.kind, e.label, e.count), strict=True):
            col.append(v)
    # Flow conservation against the interval's exact block counts.
    counts = {
        rv.resource: next((v.total or v.value for v in rv.values if v.metric == pb.METRIC_COUNT), 0)
        for rv in b.resources
    }
    for row, per in flow.items():
        for off, brow in shapes[row].block_rows.items():
            c = int(counts.get(brow, 0))
            tin, tout = per.get(off, [0, 0])
            tol = IN_FLIGHT + c // 100
            if abs(tin - c) > tol or abs(tout - c) > tol:
                raise InvalidInput(
                    f"{where}: flow is not conserved at block {off:#x} of row {row}: count {c}, "
                    f"edges in {tin}, out {tout}"
                )
    return cols


async def edge_counts(
    session: AsyncSession, measurement_id: str, function_row: int, start: datetime, end: datetime
) -> dict[str, Any]:
    """A function row's edges' counts summed over the raw intervals starting in [start, end), with
    their labels (the weakest label seen wins), and the intervals that carried edges."""
    rows = await session.execute(
        text("""
        SELECT e.f AS src, e.t AS dst, e.k AS kind, max(e.l) AS label, sum(e.c) AS n
        FROM measurement_points p,
             unnest(p.edge_rows, p.edge_from, p.edge_to, p.edge_kinds, p.edge_labels, p.edge_counts)
               AS e(r, f, t, k, l, c)
        WHERE p.measurement_id = :m AND p.ts >= :a AND p.ts < :b AND e.r = :r
        GROUP BY e.r, e.f, e.t, e.k ORDER BY e.f, e.t, e.k"""),
        {"m": measurement_id, "a": start, "b": end, "r": function_row},
    )
    out = [
        {
            "from_offset": None if r.src == NONE else r.src,
            "to_offset": None if r.dst == NONE else r.dst,
            "kind": EDGE_KINDS.get(r.kind, "unknown"),
            "label": EDGE_LABELS.get(r.label, "unknown"),
            "count": int(r.n),
        }
        for r in rows
    ]
    intervals = (
        await session.execute(
            text("""
        SELECT count(*) FROM measurement_points
        WHERE measurement_id = :m AND ts >= :a AND ts < :b AND :r = ANY(edge_rows)"""),
            {"m": measurement_id, "a": start, "b": end, "r": function_row},
        )
    ).scalar_one()
    return {"edges": out, "edge_intervals": int(intervals)}
