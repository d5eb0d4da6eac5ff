# SPDX-License-Identifier: Apache-2.0
"""Layout candidates: a target's functions ranked by what re-laying them out could gain, from what the
backend has stored — a heuristic ranking, not a predicted gain (docs/plans.md, "Which functions to
optimize").

Per function:
- weight: its share of the host's samples in the range (the kernel target, whose samples are stored by
  block). A process's samples reach the backend as call stacks by file offset, which the catalog does
  not map to functions, so for a process the weight is its share of the instructions executed by the
  target's functions measured with their blocks (block count × the block's instructions, summed, of
  the newest exact block-count measurement of each);
- hot footprint: its hot blocks (counted by that measurement where there is one, else sampled in the
  range), their bytes and the L1i lines they touch at the function's address, against the host's L1i
  (lines, and the fewest lines those bytes could fill);
- branch density: jumps ending its hot blocks (a taken, tail-call or indirect successor in the catalog:
  conditional and unconditional jumps, not calls or returns) per 64 bytes of hot code;
- taken share, where an exact block-count measurement's derived edges exist: of those jumps' executions,
  the share that jumped (an unconditional jump always does);
- score = weight × hot lines × branch density × (taken share, or 1 where not measured).
Functions that cannot move (bytes the catalog could not decode, or kept in place by one of the
target's plans, with its rule) are marked and ranked after those that can. A figure that cannot be had
is null, and the row says why."""

import math
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.protocol.measured_edges import EDGE_LABELS
from app.protocol.proto import pb
from app.storage import layout_facts, samples
from app.storage.models import hex64

DENSITY_BYTES = 64  # branch density is per this many bytes of hot code
# Catalog successor kinds that end a block with a jump (function_code.blocks' kinds are SuccessorKind).
JUMP_KINDS = {pb.SUCCESSOR_KIND_TAKEN, pb.SUCCESSOR_KIND_TAIL_CALL, pb.SUCCESSOR_KIND_INDIRECT}
# Edge kinds that leave a block by its jump; a fallthrough leaves it without jumping.
JUMPED_EDGES = {pb.EDGE_KIND_TAKEN, pb.EDGE_KIND_TAIL_CALL, pb.EDGE_KIND_INDIRECT}
EXACT_LABEL = next(k for k, v in EDGE_LABELS.items() if v == "exact_derived")
NO_PROCESS_SAMPLES = (
    "a process's samples reach the backend as call stacks by file offset, which the catalog does not map to functions"
)


def hot_lines(address: int, blocks: list[tuple[int, int]], line_bytes: int) -> int:
    """Distinct cache lines that the blocks (offset, size) of a function at `address` touch."""
    lines: set[int] = set()
    for off, size in blocks:
        if size <= 0:
            continue
        first, last = (address + off) // line_bytes, (address + off + size - 1) // line_bytes
        lines.update(range(first, last + 1))
    return len(lines)


def jump_blocks(code: list[Any]) -> set[int]:
    """Offsets of the catalog blocks that end in a jump."""
    return {int(b[0]) for b in code if any(int(s[0]) in JUMP_KINDS for s in b[3])}


def taken_share(edges: list[tuple[int, int, int, int, int]], jumps: set[int]) -> tuple[float | None, int]:
    """Of the executions of the jumps ending `jumps` blocks, the share that jumped, and the executions;
    (None, n) when any of those edges is not exact-derived or nothing ran."""
    taken = total = 0
    for frm, _to, kind, label, count in edges:
        if frm not in jumps:
            continue
        if label != EXACT_LABEL:
            return None, 0
        total += count
        if kind in JUMPED_EDGES:
            taken += count
    return (taken / total if total else None), total


def block_counts(edges: list[tuple[int, int, int, int, int]]) -> dict[int, int]:
    """Each block's executions from exact edges: the sum of its out-edges (flow is conserved)."""
    out: dict[int, int] = {}
    for frm, _to, _kind, _label, count in edges:
        if frm >= 0:
            out[frm] = out.get(frm, 0) + count
    return out


def figures(
    fn: dict[str, Any],
    hot: dict[int, int],
    hot_basis: str,
    geometry: dict[str, Any] | None,
    edges: list[tuple[int, int, int, int, int]] | None,
) -> dict[str, Any]:
    """A function's footprint, branch density and taken share from its hot blocks (offset → samples or
    executions) and, where measured, its exact edges."""
    code = fn["blocks"]
    sizes = {int(b[0]): int(b[1]) for b in code}
    hot_sizes = [(off, sizes[off]) for off in sorted(hot) if off in sizes and hot[off] > 0]
    hot_bytes = sum(s for _o, s in hot_sizes)
    jumps = jump_blocks(code)
    hot_jumps = sum(1 for off, _s in hot_sizes if off in jumps)
    out: dict[str, Any] = {
        "hot_basis": hot_basis,
        "hot_blocks": len(hot_sizes),
        "blocks": len(code),
        "hot_bytes": hot_bytes,
        "hot_jumps": hot_jumps,
        "branch_density": (hot_jumps * DENSITY_BYTES / hot_bytes) if hot_bytes else None,
        "hot_lines": None,
        "minimum_lines": None,
        "l1i_lines": None,
        "l1i_share": None,
        "taken_share": None,
        "jump_executions": None,
    }
    if geometry and geometry.get("line_bytes") and geometry.get("size_bytes"):
        line = int(geometry["line_bytes"])
        out["hot_lines"] = hot_lines(fn["address"], hot_sizes, line)
        out["minimum_lines"] = math.ceil(hot_bytes / line)
        out["l1i_lines"] = int(geometry["size_bytes"]) // line
        out["l1i_share"] = out["hot_lines"] / out["l1i_lines"] if out["l1i_lines"] else None
    if edges is not None:
        share, n = taken_share(edges, jumps)
        out["taken_share"], out["jump_executions"] = share, (n if share is not None else None)
    return out


def score(weight: float | None, f: dict[str, Any]) -> float | None:
    """weight × hot lines × branch density × (taken share, or 1 where not measured)."""
    if weight is None or f["hot_lines"] is None or f["branch_density"] is None:
        return None
    taken = f["taken_share"] if f["taken_share"] is not None else 1.0
    return float(weight * f["hot_lines"] * f["branch_density"] * taken)


def reason(row: dict[str, Any]) -> str:
    """One line saying what put the row where it is."""
    if row["kept"] is not None:
        return f"cannot move: {row['kept']['rule']}"
    f = row
    parts: list[str] = []
    if row["share"] is not None:
        parts.append(f"{row['share'] * 100:.1f}% of samples")
    elif row["counted_share"] is not None:
        parts.append(f"{row['counted_share'] * 100:.1f}% of the measured functions' instructions")
    if f["hot_lines"] is not None:
        n = f["hot_lines"]
        parts.append(
            f"{n} hot line{'' if n == 1 else 's'} ({f['l1i_share'] * 100:.2f}% of the L1i, "
            f"{f['minimum_lines']} if packed)"
        )
    if f["hot_jumps"]:
        parts.append(f"{f['branch_density']:.1f} jumps per 64 B")
    if f["taken_share"] is not None:
        parts.append(f"{f['taken_share'] * 100:.0f}% of jumps taken")
    if not f["hot_jumps"] and f["hot_bytes"]:
        parts.append("no jump in its hot code: block order cannot change its fetch")
    return "; ".join(parts) or (row["unavailable"][0] if row["unavailable"] else "no figures")


async def rank(
    session: AsyncSession, host_id: str, target_id: str, spec: samples.RangeSpec, limit: int
) -> dict[str, Any]:
    """The target's layout candidates, best first (see the module's docstring)."""
    geometry = await layout_facts.l1i(session, host_id)
    r = await samples.resolve(session, host_id, spec) if target_id == "kernel" else None
    out_range = r or samples.empty_range(spec)
    sampled: dict[int, dict[int, int]] = {}
    total = 0
    if r is not None:
        total = (await samples.totals(session, host_id, r))["total_samples"]
        sampled = await samples.hot_blocks(session, host_id, r, limit)
    if target_id == "kernel":
        fns = await layout_facts.target_functions(session, host_id, target_id, function_ids=list(sampled))
        keys = [(f["digest"], f["index"]) for f in fns]
        measured = await samples.newest_block_edges(session, host_id, target_id, keys)
    else:
        measured = await samples.newest_block_edges(session, host_id, target_id, None)
        fns = await layout_facts.target_functions(session, host_id, target_id, keys=list(measured))
    kept = await layout_facts.kept_in_place(session, host_id, target_id)

    counts = {k: block_counts(m["edges"]) for k, m in measured.items()}
    instructions: dict[tuple[str, int], int] = {}
    for f in fns:
        k = (f["digest"], f["index"])
        if k in counts:
            per = {int(b[0]): int(b[2]) for b in f["blocks"]}
            instructions[k] = sum(c * per.get(off, 0) for off, c in counts[k].items())
    all_instructions = sum(instructions.values())

    rows = []
    for f in fns:
        k = (f["digest"], f["index"])
        m = measured.get(k)
        unavailable = []
        if m is not None:
            hot, basis = counts[k], "exact_counts"
        else:
            hot, basis = sampled.get(f["function_id"], {}), "samples"
        figs = figures(f, hot, basis, geometry, m["edges"] if m else None)
        samples_n = sum(sampled.get(f["function_id"], {}).values()) if target_id == "kernel" else None
        share = (samples_n / total if total else 0.0) if samples_n is not None else None
        counted = instructions[k] / all_instructions if target_id != "kernel" and k in instructions else None
        if target_id != "kernel":
            unavailable.append(f"sampled share unavailable: {NO_PROCESS_SAMPLES}")
        if geometry is None:
            unavailable.append("L1i figures unavailable: the host reported no L1i geometry")
        if m is None:
            unavailable.append("taken share unavailable: no exact block-count measurement of it")
        elif figs["taken_share"] is None:
            unavailable.append("taken share unavailable: its jumps' edges are not all exact-derived, or none ran")
        keep = kept.get((f["name"], f["address"]))
        if keep is None and f["undecodable"]:
            keep = {"plan_id": None, "rule": f"bytes at +{f['undecodable_offset']:#x} did not decode", "detail": ""}
        row = {
            "function_id": f["function_id"],
            "name": f["name"],
            "module": f["module"],
            "digest": f["digest"],
            "function_index": f["index"],
            "address": f["address"],
            "address_hex": hex64(f["address"]),
            "size": f["size"],
            "samples": samples_n,
            "share": share,
            "counted_share": counted,
            "measurement_id": m["measurement_id"] if m else None,
            **figs,
            "movable": keep is None,
            "kept": keep,
            "unavailable": unavailable,
        }
        row["score"] = score(share if share is not None else counted, figs)
        row["reason"] = reason(row)
        rows.append(row)
    rows.sort(key=lambda x: (not x["movable"], -(x["score"] if x["score"] is not None else -1.0), x["name"]))
    return {
        **out_range.public(),
        "target_id": target_id,
        "weight": "samples" if target_id == "kernel" else "exact_counts",
        "l1i": geometry,
        "total_samples": total if target_id == "kernel" else None,
        "items": rows[:limit],
    }
