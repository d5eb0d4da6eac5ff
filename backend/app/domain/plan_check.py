# SPDX-License-Identifier: Apache-2.0
"""The backend's check of a plan an agent sends (PlanResult): nothing is stored unless it passes.

An agent is root on its host but the backend trusts nothing it sends. A plan is the JSON of
`hotpathd plan --json` (docs/agent-cli.md): it must fit the size limit, have the documented shape
(the pydantic models app/gen/plan.py generated from proto/hotpath/v1/plan.schema.json; members the
agent adds later are kept, as the format allows), and hold the
invariants a console and an installer rely on:

- the root is the function asked for and the group's first member; a hot set's plan (no root asked)
  says so in its options (`hot_set`), and only it does;
- every layout block lies inside its function (offset + size <= the function's size), blocks are in
  ascending, non-overlapping order, counts are non-negative, and a block's chain names a chain of its
  function's chain table (or -1: cold); every chain's blocks are blocks of the layout;
- per function, hot and cold bytes equal the sums over its hot and cold blocks; the totals equal the
  sums over the group (the taken branches to their rounding: each figure is written to 0.1);
- I-cache cells lie inside the geometry (set < sets; a way at or past the associativity only in a set
  that conflicts), each set numbers its lines 0..n-1 once, a line maps to its set, and the figures
  (hot lines, conflict sets, lines in the fullest set, distance to the minimum) agree with the cells;
- the code's hex has `code.bytes` bytes, relocations lie inside it (a `code64` one, a label table's
  entry, names an address inside it too), the unwind data follows it, and the
  code hash recomputed here in the agent's canonical form (plan/identity.c: "hotpath-code/1" and a NUL,
  then base, length and bytes of the code, the unwind offset, length and bytes, the relocation count
  and each relocation's offset (its kind above its low 32 bits: `rel32` 0, `abs64` 1, `code64` 2)
  and target, integers
  as 64-bit little-endian) equals `code.sha256`,
  which must equal PlanResult.code_sha256;
- the target is the one asked for (a process's pid and start time as in its target id), and the build
  id PlanResult names is the plan's module build id (kernel: its build id).
"""

import hashlib
import struct
from typing import Any

import orjson
from pydantic import ValidationError

from app.gen.plan import Plan, PlanCell, PlanCode, PlanICache, PlanMember

Code = PlanCode  # the name the tests and the scripted agent import

_RELOC_KIND = {"rel32": 0, "abs64": 1, "code64": 2}  # enum hp_reloc_kind (agent/src/plan/plan.h)


class PlanInvalid(ValueError):
    """A plan that fails the check: the reason names what is wrong."""


def code_hash(code: PlanCode) -> str:
    """SHA-256 of the code in the agent's canonical form (agent/src/plan/identity.c, hp_code_hash)."""
    body = bytes.fromhex(code.hex)
    unwind = bytes.fromhex(code.unwind.hex) if code.unwind is not None else b""
    h = hashlib.sha256(b"hotpath-code/1\0")
    h.update(struct.pack("<QQ", int(code.base, 16), len(body)))
    h.update(body)
    h.update(struct.pack("<QQ", code.unwind.offset if code.unwind is not None else 0, len(unwind)))
    h.update(unwind)
    h.update(struct.pack("<Q", len(code.relocations)))
    for r in code.relocations:
        kind = _RELOC_KIND[r.kind]  # enum hp_reloc_kind, above the offset as identity.c puts it
        h.update(struct.pack("<QQ", r.offset | kind << 32, int(r.target, 16)))
    return h.hexdigest()


def _check_member(m: PlanMember) -> None:
    fn = m.function
    if len(m.layout) != m.blocks:
        raise PlanInvalid(f"{fn}: {m.blocks} blocks stated, {len(m.layout)} in its layout")
    end = 0
    for b in sorted(m.layout, key=lambda b: b.offset):
        if b.offset < end:
            raise PlanInvalid(f"{fn}: block +{b.offset:#x} overlaps the block before it")
        end = b.offset + b.size
    placed = 0
    for b in m.layout:
        new = int(b.new_address, 16) if b.new_address else 0
        if new < placed:
            raise PlanInvalid(
                f"{fn}: block +{b.offset:#x} is out of layout order (its new address is below the "
                f"end of the block before it)"
            )
        placed = new + b.new_size
        if b.offset + b.size > m.size:
            raise PlanInvalid(f"{fn}: block +{b.offset:#x} ({b.size} bytes) ends past the function's {m.size} bytes")
        if b.chain >= len(m.chain_table):
            raise PlanInvalid(
                f"{fn}: block +{b.offset:#x} names chain {b.chain}; the function has {len(m.chain_table)}"
            )
        if b.hot != (b.chain >= 0):
            raise PlanInvalid(f"{fn}: block +{b.offset:#x} is {'hot' if b.hot else 'cold'} but its chain is {b.chain}")
    if len(m.chain_table) != m.chains:
        raise PlanInvalid(f"{fn}: {m.chains} chains stated, {len(m.chain_table)} in its chain table")
    offsets = {b.offset for b in m.layout}
    for i, c in enumerate(m.chain_table):
        if c.chain != i:
            raise PlanInvalid(f"{fn}: chain table row {i} is numbered {c.chain}")
        for o in c.blocks:
            if o not in offsets:
                raise PlanInvalid(f"{fn}: chain {c.chain} names block +{o:#x}, which its layout lacks")
    hot = [b for b in m.layout if b.hot]
    sums = {
        "hot_blocks": len(hot),
        "hot_bytes": sum(b.size for b in hot),
        "cold_bytes": sum(b.size for b in m.layout if not b.hot),
        "new_hot_bytes": sum(b.new_size + b.padding for b in hot),
        "new_cold_bytes": sum(b.new_size + b.padding for b in m.layout if not b.hot),
    }
    for key, value in sums.items():
        if getattr(m, key) != value:
            raise PlanInvalid(f"{fn}: {key} is {getattr(m, key)}, its layout sums to {value}")
    for e in m.edge_counts:
        if e.from_ not in offsets or e.to not in offsets:
            raise PlanInvalid(f"{fn}: an edge count names a block its layout lacks (+{e.from_:#x} → +{e.to:#x})")


def _check_icache(name: str, ic: PlanICache) -> None:
    per_set: dict[int, list[PlanCell]] = {}
    for c in ic.cells:
        if c.set >= ic.sets:
            raise PlanInvalid(f"{name}: a cell is in set {c.set}; the cache has {ic.sets}")
        line = int(c.line, 16)
        if line % ic.line_bytes or (line // ic.line_bytes) % ic.sets != c.set:
            raise PlanInvalid(f"{name}: line {c.line} does not map to set {c.set}")
        per_set.setdefault(c.set, []).append(c)
    conflicts, fullest = 0, 0
    for s, cells in per_set.items():
        if sorted(c.way for c in cells) != list(range(len(cells))):
            raise PlanInvalid(f"{name}: set {s} does not number its lines 0..{len(cells) - 1} once each")
        conflict = len(cells) > ic.ways
        if any(c.conflict != conflict for c in cells):
            raise PlanInvalid(
                f"{name}: set {s} holds {len(cells)} lines in {ic.ways} ways but its cells say conflict={not conflict}"
            )
        conflicts += conflict
        fullest = max(fullest, len(cells))
    if len(ic.cells) != ic.hot_lines:
        raise PlanInvalid(f"{name}: {ic.hot_lines} hot lines stated, {len(ic.cells)} cells")
    if ic.conflict_sets != conflicts or ic.max_lines_in_a_set != fullest:
        raise PlanInvalid(f"{name}: the conflict figures disagree with the cells")
    if ic.distance_to_minimum != ic.hot_lines - ic.minimum_lines:
        raise PlanInvalid(f"{name}: distance_to_minimum is not hot_lines - minimum_lines")


def check(
    text: str,
    *,
    root_name: str | None,
    target_id: str,
    code_sha256: str,
    build_id: str,
    max_bytes: int,
) -> tuple[dict[str, Any], Plan]:
    """Parse and check a plan; returns (the JSON as a dict, its model), or raises PlanInvalid.
    root_name None: a hot set was asked for, and the plan's root is the first function it laid out."""
    if len(text.encode()) > max_bytes:
        raise PlanInvalid(f"the plan is {len(text.encode())} bytes; at most {max_bytes} are accepted")
    try:
        raw = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise PlanInvalid(f"the plan is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise PlanInvalid("the plan is not a JSON object")
    try:
        plan = Plan.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise PlanInvalid(
            f"the plan's {where or 'shape'} is malformed: {first['msg']} ({exc.error_count()} problem(s))"
        ) from None
    options = raw.get("options")
    hot_set = isinstance(options, dict) and options.get("hot_set") is True
    if hot_set != (root_name is None):
        raise PlanInvalid(
            "the plan is of a hot set, not of the root asked for"
            if hot_set
            else "the plan is of one root, not of the hot set asked for"
        )
    if root_name is not None and plan.root != root_name:
        raise PlanInvalid(f"the plan is for {plan.root}, not {root_name} as asked")
    root_name = plan.root
    t = plan.target
    if target_id == "kernel":
        if t.kind != "kernel":
            raise PlanInvalid(f"the plan is for a {t.kind} target, not the kernel as asked")
    else:
        pid, start = (int(x) for x in target_id[1:].split("-", 1))
        if t.kind != "pid" or t.pid != pid or t.start_time != start:
            raise PlanInvalid(
                f"the plan is for {t.kind} {t.pid} (started {t.start_time}), not the process {target_id} as asked"
            )
    plan_build = (t.module_build_id or t.build_id) if t.kind != "kernel" else t.build_id
    if build_id != plan_build:
        raise PlanInvalid(f"the result names build id {build_id!r}; the plan's is {plan_build!r}")
    if plan.status != "ok":
        if code_sha256:
            raise PlanInvalid(f"a plan whose status is {plan.status} names a code hash")
        return raw, plan
    if not plan.group or plan.group[0].function != root_name:
        raise PlanInvalid("the root is not the group's first member")
    if plan.totals is None or plan.icache_before is None or plan.icache_after is None or plan.code is None:
        raise PlanInvalid("a plan with status ok lacks totals, I-cache figures or code")
    for m in plan.group:
        _check_member(m)
    sums = {"functions": len(plan.group)}
    for key in ("hot_bytes", "cold_bytes", "jump_table_bytes", "new_hot_bytes", "new_cold_bytes"):
        sums[key] = sum(getattr(m, key) for m in plan.group)
    for key, value in sums.items():
        if getattr(plan.totals, key) != value:
            raise PlanInvalid(f"totals.{key} is {getattr(plan.totals, key)}; the group sums to {value}")
    for key in ("taken_branches_before", "taken_branches_after"):
        # each figure is written to 0.1: the sum of the members' may differ from the total by their rounding
        value = sum(getattr(m, key) for m in plan.group)
        if abs(getattr(plan.totals, key) - value) > 0.05 * (len(plan.group) + 1) + 1e-9:
            raise PlanInvalid(f"totals.{key} is {getattr(plan.totals, key)}; the group sums to {value:.1f}")
    _check_icache("icache_before", plan.icache_before)
    _check_icache("icache_after", plan.icache_after)
    code = plan.code
    if not code.verified:
        raise PlanInvalid("the plan's code was not verified")
    if len(code.hex) != 2 * code.bytes:
        raise PlanInvalid(f"code.hex holds {len(code.hex) // 2} bytes; code.bytes says {code.bytes}")
    base = int(code.base, 16)
    for r in code.relocations:
        if r.offset + (4 if r.kind == "rel32" else 8) > code.bytes:
            raise PlanInvalid(f"a relocation at +{r.offset:#x} ({r.kind}) lies outside the code")
        if r.kind == "code64" and not base <= int(r.target, 16) < base + code.bytes:
            raise PlanInvalid(f"a code64 relocation at +{r.offset:#x} names {r.target}, which is not in the code")
    if code.unwind is not None and (code.unwind.offset < code.bytes or len(code.unwind.hex) != 2 * code.unwind.bytes):
        raise PlanInvalid("the unwind data overlaps the code or its length disagrees with its bytes")
    spans = sorted(
        (int(b.new_address, 16), b.new_size, m.function, b.offset)
        for m in plan.group
        for b in m.layout
        if b.new_address
    )
    placed = base
    for new, size, fn, off in spans:
        if new < placed or new + size > base + code.bytes:
            raise PlanInvalid(f"{fn}: block +{off:#x} is placed outside the code or over another block")
        placed = new + size
    recomputed = code_hash(code)
    if recomputed != code.sha256:
        raise PlanInvalid(f"code.sha256 is {code.sha256} but the code hashes to {recomputed}")
    if code_sha256 != code.sha256:
        raise PlanInvalid(f"the result names code hash {code_sha256!r}; the plan's is {code.sha256}")
    return raw, plan
