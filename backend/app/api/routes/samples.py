# SPDX-License-Identifier: Apache-2.0
"""A host's samples over a time range (`window_s`, or `from` and `to`; see app.api.ranges): top
functions, per-function hotness, the host's samples over time, two ranges (or two hosts) compared, and
the profile exported. Every read goes through app.storage.samples."""

import csv
import io
from collections.abc import Callable
from datetime import datetime
from typing import Literal

from fastapi import APIRouter, Depends, Query, Response

from app.api.deps import CurrentUser, RuntimeDep, SessionDep, read_across_nodes
from app.api.ranges import BAD_RANGE, AFromQuery, AToQuery, BFromQuery, BHostQuery, BToQuery, SampleRange, two_ranges
from app.api.responses import NOT_FOUND, FastJSON
from app.api.routes.hosts import ExistingHost
from app.api.routes.stacks import Filter
from app.api.schemas import Comparison, Hotness, Timeline, TopFunctions
from app.storage import hosts, samples, stacks

# Read only: read across the database nodes.
router = APIRouter(prefix="/hosts/{host_id}", tags=["samples"], dependencies=[Depends(read_across_nodes)])
IncludeIdle = Query(False, description="Rank the kernel's idle-loop functions too (they are counted apart otherwise)")
EXPORT_ROWS = 100000


@router.get("/top-functions", response_model=TopFunctions, responses={**NOT_FOUND, **BAD_RANGE})
async def top_functions(
    host_id: ExistingHost,
    session: SessionDep,
    _: CurrentUser,
    spec: SampleRange,
    limit: int = Query(50, ge=1, le=10000),
    offset: int = Query(0, ge=0, le=1_000_000),
    sort: Literal["samples", "inclusive", "name", "module"] = "samples",
    order: Literal["desc", "asc"] = "desc",
    include_idle: bool = IncludeIdle,
) -> FastJSON:
    """Functions by self samples (or inclusive samples, from call stacks) in the range, with the host's totals
    (all, user, kernel, idle)."""
    return FastJSON(
        await samples.top_functions(session, host_id, spec, limit, offset, sort, order == "desc", include_idle)
    )


@router.get("/hotness", response_model=Hotness, responses={**NOT_FOUND, **BAD_RANGE})
async def hotness(host_id: ExistingHost, session: SessionDep, _: CurrentUser, spec: SampleRange) -> FastJSON:
    """Samples per second of every function that had samples in the range."""
    return FastJSON(await samples.hotness(session, host_id, spec))


@router.get("/timeline", response_model=Timeline, responses={**NOT_FOUND, **BAD_RANGE})
async def timeline(
    host_id: ExistingHost,
    session: SessionDep,
    _: CurrentUser,
    spec: SampleRange,
    points: int = Query(300, ge=10, le=2000, description="At most this many buckets"),
) -> FastJSON:
    """The host's samples over time (all, user, kernel, idle) in round buckets."""
    return FastJSON(await samples.timeline(session, host_id, spec, points))


@router.get("/compare", response_model=Comparison, responses={**NOT_FOUND, **BAD_RANGE})
async def compare(
    host_id: ExistingHost,
    session: SessionDep,
    runtime: RuntimeDep,
    _: CurrentUser,
    a_from: datetime = AFromQuery,
    a_to: datetime = AToQuery,
    b_from: datetime = BFromQuery,
    b_to: datetime = BToQuery,
    b_host: str | None = BHostQuery,
    limit: int = Query(200, ge=1, le=10000),
    include_idle: bool = IncludeIdle,
) -> FastJSON:
    """Per-function samples per second in range A and range B, largest change first."""
    a, other, b = await two_ranges(runtime, session, host_id, (a_from, a_to), (b_from, b_to), b_host)
    return FastJSON(await samples.compare(session, host_id, a, other, b, limit, include_idle))


@router.get(
    "/profile",
    responses={
        **NOT_FOUND,
        **BAD_RANGE,
        200: {
            "description": "The profile as a file (format=csv: one row per function, most samples first; "
            "format=pprof: the call stacks as a gzipped pprof profile.proto)",
            "content": {
                "text/csv": {"schema": {"type": "string"}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            },
        },
    },
)
async def export_profile(
    host_id: ExistingHost,
    session: SessionDep,
    _: CurrentUser,
    spec: SampleRange,
    flt: Filter,
    format: Literal["csv", "pprof"] = Query(
        "csv",
        description="csv: top functions; pprof: call stacks (gzipped profile.proto, "
        "read by go tool pprof, speedscope and other pprof tools)",
    ),
    include_idle: bool = IncludeIdle,
) -> Response:
    """Download the host's profile for a range: top functions as CSV, or its call stacks as pprof."""
    stamp: Callable[[datetime], str] = lambda d: d.strftime("%Y%m%dT%H%M%SZ")  # noqa: E731 - local helper
    if format == "pprof":
        r = await samples.resolve(session, host_id, spec) or samples.empty_range(spec)
        host = await hosts.get_host_public(session, host_id)
        if include_idle:
            flt = stacks.StackFilter(pid=flt.pid, comm=flt.comm, cpu=flt.cpu, idle="include")
        body = await stacks.pprof(session, host_id, r.start, r.end, flt, (host or {}).get("sample_frequency_hz") or 997)
        name = f"hotpath-{_safe(host_id)}-{stamp(r.start)}-{stamp(r.end)}.pb.gz"
        return Response(
            body,
            media_type="application/octet-stream",
            headers={
                "Content-Disposition": f'attachment; filename="{name}"',
                "X-Hotpath-Range": f"{r.start.isoformat()}/{r.end.isoformat()}",
            },
        )
    top = await samples.top_functions(session, host_id, spec, EXPORT_ROWS, 0, "samples", True, include_idle)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["rank", "function", "module", "address", "samples", "samples_per_sec", "share_of_all_samples", "idle"])
    for i, item in enumerate(top["items"], 1):
        w.writerow(
            [
                i,
                item["name"],
                item["module"],
                f"0x{item['address_hex']}" if item["address_hex"] else "",
                item["samples"],
                f"{item['samples_per_sec']:.6g}",
                f"{item['share']:.6g}",
                "yes" if item["idle"] else "no",
            ]
        )
    name = f"hotpath-{_safe(host_id)}-{stamp(top['from'])}-{stamp(top['to'])}.csv"
    return Response(
        out.getvalue(),
        media_type="text/csv",
        headers={
            "Content-Disposition": f'attachment; filename="{name}"',
            "X-Hotpath-Range": f"{top['from'].isoformat()}/{top['to'].isoformat()}",
        },
    )


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:64]
