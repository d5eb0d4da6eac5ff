# SPDX-License-Identifier: Apache-2.0
"""Read statements whose results come in Postgres' binary format, and int8[] arrays in that format parsed with
numpy: for reads that return many numbers (the fleet's hot code, a label's or a few hosts' stack sums), an
array of int8 arrives as its 8-byte elements and becomes a numpy array without a Python object per element
(docs/decisions.md, "Fleet hot code summed in the backend with numpy")."""

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession


async def binary_rows(session: AsyncSession | AsyncConnection, sql: str, params: dict[str, Any]) -> list[Any]:
    """Run a read statement in the session's (or connection's) transaction with its results in Postgres' binary
    format: a bytea comes as its bytes, not as hex text to decode (half the bytes sent; measured on bench/fleet's
    database, the 600-host group's rows, ~8 MB of arrays, in about half the time). Rows are named tuples; a
    driver error is raised as SQLAlchemy's DBAPIError, as the session's own statements raise it (so a node's
    part that loses its connection is named by `nodes.Nodes.each`)."""
    conn = await session.connection() if isinstance(session, AsyncSession) else session
    statement = text(sql).compile(dialect=conn.dialect).string
    driver = (await conn.get_raw_connection()).driver_connection
    if driver is None:
        raise RuntimeError("the session's connection has no driver connection")
    try:
        async with driver.cursor(binary=True, row_factory=namedtuple_row) as cur:
            await cur.execute(statement, params)
            return list(await cur.fetchall())
    except psycopg.Error as exc:
        raise DBAPIError.instance(statement, params, exc, psycopg.Error) from exc


# int8[] as array_send writes it (Postgres' binary array format): the number of dimensions, a has-NULLs flag and
# the element type, then each dimension's length and lower bound, then each element as its byte length (8) and
# its value, big-endian. An empty array has no dimensions (the first three fields only).
_INT8_OID = 20
_ARRAY_HEAD = struct.Struct(">iiiii")
_EMPTY_ARRAY = struct.Struct(">iii")
_ELEMENT = np.dtype([("len", ">i4"), ("value", ">i8")])
I64 = npt.NDArray[np.int64]


def int8_arrays(blobs: Sequence[bytes]) -> tuple[I64, I64]:
    """The elements of int8[] arrays in array_send's form, concatenated, and each array's length."""
    lengths = np.zeros(len(blobs), dtype=np.int64)
    bodies: list[memoryview] = []
    for i, blob in enumerate(blobs):
        if len(blob) == _EMPTY_ARRAY.size and _EMPTY_ARRAY.unpack(blob)[0] == 0:
            continue
        ndim, nulls, oid, size, _lower = _ARRAY_HEAD.unpack_from(blob)
        if ndim != 1 or nulls or oid != _INT8_OID or len(blob) != _ARRAY_HEAD.size + size * _ELEMENT.itemsize:
            raise ValueError("a rollup array is not a one-dimensional int8[] without NULLs")
        lengths[i] = size
        bodies.append(memoryview(blob)[_ARRAY_HEAD.size :])
    # Without NULLs every element of an int8[] is 8 bytes long (the length checked above says so too).
    elements = np.frombuffer(b"".join(bodies), dtype=_ELEMENT)
    return elements["value"].astype(np.int64), lengths
