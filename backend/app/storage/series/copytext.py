# SPDX-License-Identifier: Apache-2.0
"""Rows in PostgreSQL's COPY text format, built with string joins.

The ingest writer stores every interval as one row of long arrays (a thousand block counts, their
idle flags and instruction counts) and every stack as a row of short arrays. psycopg's generic array
dumper inspects every element in Python (a regular expression per element, to decide on quoting), which
made it the largest cost of ingest; numbers and booleans never need quoting, so their literals are
built by one `join`. Text (host ids, command names) is quoted and escaped here as COPY and array
literals require. Measured by bench/ingest.
"""

from collections.abc import Iterable, Sequence
from datetime import datetime

_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def field(value: str) -> str:
    """A text field, escaped for COPY."""
    return value.translate(_COPY_ESCAPES)


def ts(value: datetime) -> str:
    return value.isoformat()


def ints(values: Iterable[int]) -> str:
    """An integer array literal: {1,2,3}."""
    return "{" + ",".join(map(str, values)) + "}"


def floats(values: Iterable[float | None]) -> str:
    """A float8 array literal with NULLs: {1.5,NULL}."""
    return "{" + ",".join("NULL" if v is None else repr(float(v)) for v in values) + "}"


def bools(values: Iterable[bool]) -> str:
    return "{" + ",".join("t" if v else "f" for v in values) + "}"


def texts(values: Iterable[str]) -> str:
    """A text array literal, every element quoted (then the whole field escaped for COPY)."""
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return field("{" + ",".join(quoted) + "}")


def row(fields: Sequence[str]) -> str:
    return "\t".join(fields) + "\n"
