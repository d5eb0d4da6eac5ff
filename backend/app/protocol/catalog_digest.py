# SPDX-License-Identifier: Apache-2.0
"""The catalog's canonical encoding and its digest, recomputed from what an agent sends.

A catalog piece is named by the SHA-256 of a canonical serialization of its content; the agent
computes it in `agent/src/daemon/catalog.c` (hp_catalog_digest). The backend never trusts the name:
it feeds every function of an arriving piece, in order, through the same encoding and stores the
piece only if the result equals the digest the agent announced. The encoding (version
"hotpath-catalog-v1"): strings are their UTF-8 bytes and a NUL; integers are fixed-width little
endian; references to code elsewhere (tail-call and call targets) are "module", "function", u64
offset into that function, or "?", "", u64 offset from the first module's base when the target lies
outside every known function, so KASLR does not change the digest.
"""

import hashlib
import struct
from collections.abc import Iterable

from app.protocol.proto import pb

VERSION = "hotpath-catalog-v1"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_FN_HEAD = struct.Struct("<QIIII")  # offset, size, undecodable, undecodable offset, block count
_BLOCK = struct.Struct("<IIII")  # offset, size, instruction count, successor count
_MASK = (1 << 64) - 1
_TAIL_CALL = 3  # SUCCESSOR_KIND_TAIL_CALL


def _str(value: str) -> bytes:
    return value.encode() + b"\0"


def split_target_name(name: str) -> tuple[str, int] | None:
    """'func' → ('func', 0); 'func+0x1c' → ('func', 0x1c); None if the offset is not hex."""
    head, sep, tail = name.rpartition("+0x")
    if not sep or not head:
        return name, 0
    try:
        return head, int(tail, 16)
    except ValueError:
        return None


class PieceHasher:
    """Incremental digest of one piece, fed chunk by chunk in the order the agent sends them."""

    def __init__(self, build: str, module: str, function_count: int, core_base: int) -> None:
        self._h = hashlib.sha256()
        self._core_base = core_base
        self._h.update(_str(VERSION) + _str(build) + _str(module) + _U64.pack(function_count & _MASK))

    def _target(self, out: list[bytes], address: int, name: str, module: str) -> None:
        if not name:
            out.append(b"?\0\0" + _U64.pack((address - self._core_base) & _MASK))
            return
        split = split_target_name(name)
        fname, off = split if split is not None else (name, 0)
        out.append(_str(module) + _str(fname) + _U64.pack(off & _MASK))

    def add(self, functions: Iterable["pb.Function"]) -> None:
        """Feed the functions of one chunk."""
        out: list[bytes] = []
        for f in functions:
            out.append(_str(f.name))
            out.append(
                _FN_HEAD.pack(
                    f.offset,
                    f.size,
                    1 if f.undecodable else 0,
                    f.undecodable_offset if f.undecodable else 0,
                    len(f.blocks),
                )
            )
            for b in f.blocks:
                out.append(_BLOCK.pack(b.offset, b.size, b.instruction_count, len(b.successors)))
                for s in b.successors:
                    out.append(_U32.pack(s.kind))
                    if s.kind == _TAIL_CALL:
                        self._target(out, s.target, s.target_name, s.target_module)
                    else:
                        out.append(_U64.pack(s.target))
            out.append(_U32.pack(len(f.calls)))
            for c in f.calls:
                out.append(_U32.pack(c.site_offset))
                self._target(out, c.target, c.target_name, c.target_module)
            out.append(_U32.pack(len(f.indirect_call_sites)))
            if f.indirect_call_sites:
                out.append(struct.pack(f"<{len(f.indirect_call_sites)}I", *f.indirect_call_sites))
        self._h.update(b"".join(out))

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def piece_digest(build: str, module: str, core_base: int, functions: list["pb.Function"]) -> str:
    """The digest of a whole piece given as one list of functions (tests and fake agents use it)."""
    hasher = PieceHasher(build, module, len(functions), core_base)
    hasher.add(functions)
    return hasher.hexdigest()
