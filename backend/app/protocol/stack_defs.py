# SPDX-License-Identifier: Apache-2.0
"""A call stack as agents define it: its content id (`stack_id`, the agent's daemon/stack_defs.c computes
the same) and one metric batch's stacks once checked (`BatchStacks`, made by agent_input.check_stacks and
stored by app.storage.stacks)."""

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

# A stack's module as stored with its definition: (frame kind, key, name), the key a kernel catalog
# digest or a user file's path ("" for bare addresses).
FrameModule = tuple[int, str, str]


def stack_id(frames: Iterable[tuple[int, str, int, int]]) -> int:
    """The content id of a stack (frames leaf first as (kind, module key, function index, offset)): the
    first 8 bytes of the SHA-256 of the canonical encoding, little-endian (see proto Stack.id)."""
    h = hashlib.sha256()
    for kind, key, fn, offset in frames:
        k = key.encode()
        h.update(struct.pack("<BI", kind, len(k)) + k + struct.pack("<IQ", fn, offset))
    return int.from_bytes(h.digest()[:8], "little")


@dataclass
class BatchStacks:
    """The stacks of one metric batch, checked, ready to store: definitions (id, modules, flattened
    frames) and per-stack rows (id, total, pids, comms, cpus, counts)."""

    defs: list[tuple[int, list[FrameModule], list[int]]] = field(default_factory=list)
    rows: list[tuple[int, int, list[int], list[str], list[int], list[int]]] = field(default_factory=list)
