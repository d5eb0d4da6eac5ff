# SPDX-License-Identifier: Apache-2.0
"""The time range of a sample query, as every series route takes it: `window_s` (the last N seconds of
the host's own samples) or `from` and `to` (an absolute interval, ISO 8601; without a zone, UTC).
Validated here once: `to` after `from`, a span no longer than the retention (at least one hour), and
never both forms at once."""

from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, HTTPException, Query

from app.api.deps import RuntimeDep
from app.api.responses import Responses
from app.api.schemas import Message
from app.runtime import Runtime
from app.storage.samples import RangeSpec

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
