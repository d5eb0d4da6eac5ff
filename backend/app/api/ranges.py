# SPDX-License-Identifier: Apache-2.0
"""The time range of a sample query, as every series route takes it: `window_s` (the last N seconds of
the host's own samples) or `from` and `to` (an absolute interval, ISO 8601; without a zone, UTC).
Validated here once: `to` after `from`, a span no longer than the retention (at least one hour), and
never both forms at once."""

from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, HTTPException, Query
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.deps import RuntimeDep
from app.api.responses import Responses
from app.api.schemas import Message
from app.runtime import Runtime
from app.storage import hosts
from app.storage.samples import RangeSpec, TimeRange

DEFAULT_WINDOW_S = 10
BAD_RANGE: Responses = {400: {"model": Message, "description": "The time range is not valid"}}

WindowQuery = Query(
    None,
    ge=1,
    le=86400,
    description="The last N seconds of the host's samples, ending at its "
    "newest interval (default 10 when no from/to is given)",
)
FromQuery = Query(None, alias="from", description="Start of an absolute range (ISO 8601; UTC if no zone)")
ToQuery = Query(None, description="End of an absolute range, exclusive (ISO 8601; UTC if no zone)")
# A comparison's two ranges (A on the route's host, B on it or on `b_host`), both absolute.
AFromQuery = Query(description="Start of range A")
AToQuery = Query(description="End of range A (exclusive)")
BFromQuery = Query(description="Start of range B")
BToQuery = Query(description="End of range B (exclusive)")
BHostQuery = Query(None, min_length=1, max_length=256, description="Host of range B (default: the same host)")


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def range_spec(
    runtime: Runtime, window_s: int | None, start: datetime | None, end: datetime | None, what: str = "range"
) -> RangeSpec:
    if start is None and end is None:
        return RangeSpec(window_s=window_s or DEFAULT_WINDOW_S)
    if window_s is not None:
        raise HTTPException(400, f"The {what} takes either window_s or from and to, not both")
    if start is None or end is None:
        raise HTTPException(400, f"The {what} needs both from and to")
    try:
        start, end = _utc(start), _utc(end)
        span_h = (end - start).total_seconds() / 3600
    except (OverflowError, ValueError):
        raise HTTPException(400, f"The {what} is outside the representable dates") from None
    if span_h <= 0:
        raise HTTPException(400, f"The {what}'s to must be after its from")
    limit_h = max(1.0, runtime.settings.sample_retention_hours)
    if span_h > limit_h:
        raise HTTPException(400, f"The {what} may span at most {limit_h:g} h (the sample retention)")
    return RangeSpec(start=start, end=end)


def _sample_range(
    runtime: RuntimeDep,
    window_s: int | None = WindowQuery,
    from_: datetime | None = FromQuery,
    to: datetime | None = ToQuery,
) -> RangeSpec:
    return range_spec(runtime, window_s, from_, to)


SampleRange = Annotated[RangeSpec, Depends(_sample_range)]


async def two_ranges(
    runtime: Runtime,
    session: AsyncSession,
    host_id: str,
    a: tuple[datetime, datetime],
    b: tuple[datetime, datetime],
    b_host: str | None,
) -> tuple[TimeRange, str, TimeRange]:
    """A comparison's ranges, each checked as `range_spec` checks one, and range B's host (404 when it
    is another host that does not exist): (range A, B's host, range B)."""
    spec_a = range_spec(runtime, None, a[0], a[1], "range A")
    spec_b = range_spec(runtime, None, b[0], b[1], "range B")
    other = b_host or host_id
    if other != host_id and not await hosts.host_exists(session, other):
        raise HTTPException(404, "Host of range B not found")
    assert spec_a.start is not None and spec_a.end is not None  # both ends are required for a comparison
    assert spec_b.start is not None and spec_b.end is not None
    return TimeRange(spec_a.start, spec_a.end), other, TimeRange(spec_b.start, spec_b.end)
