# SPDX-License-Identifier: Apache-2.0
"""A host's call stacks over a time range: the flame graph (filtered by process, command and CPU, with the
idle task's samples excluded by default, included, or alone), two ranges or two hosts as a differential
flame graph, a function's callers and callees with the observed targets of its call sites, and its
samples per instruction. Every read goes through app.storage.stacks (and app.storage.samples for instructions)."""

from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from app.api.deps import CurrentUser, RuntimeDep, SessionDep, read_across_nodes
from app.api.ranges import BAD_RANGE, AFromQuery, AToQuery, BFromQuery, BHostQuery, BToQuery, SampleRange, two_ranges
from app.api.responses import BAD_BODY, NOT_FOUND, FastJSON, quick_gzip_json
from app.api.routes.functions import FunctionId
from app.api.routes.hosts import ExistingHost
from app.api.schemas import (
    FlameDefinitions,
    FlameDefinitionsRequest,
    FlameDiff,
    FlameGraph,
    FlameStacks,
    FunctionCalls,
    InstructionSamples,
)
from app.storage import functions, samples, stacks

# Read only (the POST of stack definitions too: its body is a list of ids): read across the database nodes.
router = APIRouter(prefix="/hosts/{host_id}", tags=["stacks"], dependencies=[Depends(read_across_nodes)])


def _quick_gzip(request: Request, content: dict[str, Any]) -> Response:
    """A flame reply by stack id, gzipped at the fastest level where the client takes gzip (the app's
    middleware leaves a reply it finds encoded alone): an hour's definitions are megabytes a console
    asks for on its first view of a host, and the middleware's level took longer to compress them than
    the rest of their answer (bench/flame prints both levels on its hour)."""
    return quick_gzip_json(request, orjson.dumps(content), {}, min_bytes=1024)


def stack_filter(
    pid: int | None = Query(
        None, ge=-1, le=2**31 - 1, description="Only this process (pid; -1: tasks that were exiting)"
    ),
    comm: str | None = Query(None, min_length=1, max_length=64, description="Only threads with this command name"),
    cpu: int | None = Query(None, ge=0, le=65535, description="Only this CPU"),
    idle: Literal["exclude", "include", "only"] = Query(
        "exclude", description="The idle task's samples (pid 0): left out, included, or alone"
    ),
) -> stacks.StackFilter:
    return stacks.StackFilter(pid=pid, comm=comm, cpu=cpu, idle=idle)


Filter = Annotated[stacks.StackFilter, Depends(stack_filter)]


async def _range(session: AsyncSession, host_id: str, spec: samples.RangeSpec) -> samples.TimeRange:
    return await samples.resolve(session, host_id, spec) or samples.empty_range(spec)


@router.get("/flamegraph", response_model=FlameGraph, responses={**NOT_FOUND, **BAD_RANGE})
async def flame_graph(
    host_id: ExistingHost, session: SessionDep, _: CurrentUser, spec: SampleRange, flt: Filter
) -> FastJSON:
    """The host's call stacks in the range as one tree, root first, frames merged by function."""
    r = await _range(session, host_id, spec)
    return FastJSON({**r.public(), **await stacks.flame_graph(session, host_id, r.start, r.end, flt)})


@router.get("/flamegraph/stacks", response_model=FlameStacks, responses={**NOT_FOUND, **BAD_RANGE})
async def flame_stacks(
    request: Request,
    host_id: ExistingHost,
    session: SessionDep,
    _: CurrentUser,
    spec: SampleRange,
    flt: Filter,
    definitions: bool = Query(False, description="Also every stack's frames (a console that keeps none of the host's)"),
) -> Response:
    """The flame graph by stack id: each stack's samples in the range, without its frames (the console
    asks /flamegraph/definitions for the stacks it has not seen and keeps them), or with them when asked."""
    r = await _range(session, host_id, spec)
    reply = await stacks.flame_stacks(session, host_id, r.start, r.end, flt, definitions=definitions)
    return _quick_gzip(request, {**r.public(), **reply})


@router.post("/flamegraph/definitions", response_model=FlameDefinitions, responses={**NOT_FOUND, **BAD_BODY})
async def flame_definitions(
    request: Request, host_id: ExistingHost, session: SessionDep, _: CurrentUser, body: FlameDefinitionsRequest
) -> Response:
    """These stacks' frames, root first and merged by function as in the flame graph (stacks without a
    definition are left out)."""
    return _quick_gzip(request, await stacks.flame_definitions(session, host_id, body.ids))


@router.get("/flamegraph/diff", response_model=FlameDiff, responses={**NOT_FOUND, **BAD_RANGE})
async def flame_diff(
    host_id: ExistingHost,
    session: SessionDep,
    runtime: RuntimeDep,
    _: CurrentUser,
    flt: Filter,
    a_from: datetime = AFromQuery,
    a_to: datetime = AToQuery,
    b_from: datetime = BFromQuery,
    b_to: datetime = BToQuery,
    b_host: str | None = BHostQuery,
) -> FastJSON:
    """Range A and range B (of this host or another) merged into one tree with both ranges' samples."""
    a, other, b = await two_ranges(runtime, session, host_id, (a_from, a_to), (b_from, b_to), b_host)
    diff = await stacks.flame_diff(session, host_id, (a.start, a.end), other, (b.start, b.end), flt)
    return FastJSON({"a": a.public(), "b": b.public(), "a_host_id": host_id, "b_host_id": other, **diff})


@router.get("/functions/{function_id}/calls", response_model=FunctionCalls, responses={**NOT_FOUND, **BAD_RANGE})
async def function_calls(
    host_id: ExistingHost, function_id: FunctionId, session: SessionDep, _: CurrentUser, spec: SampleRange, flt: Filter
) -> FastJSON:
    """Who called the function and what it called, from the range's stacks, and the callees observed at
    each of its call sites (the targets of its indirect calls among them)."""
    fn = await functions.get_host_function(session, host_id, function_id)
    if fn is None:
        raise HTTPException(404, "Function not found")
    sites = await functions.call_sites(session, fn.digest, fn.index)
    r = await _range(session, host_id, spec)
    calls = await stacks.function_calls(session, host_id, fn.digest, fn.index, r.start, r.end, flt, sites)
    return FastJSON({**r.public(), "function_id": function_id, **calls})


@router.get(
    "/functions/{function_id}/instruction-samples",
    response_model=InstructionSamples,
    responses={**NOT_FOUND, **BAD_RANGE},
)
async def instruction_samples(
    host_id: ExistingHost, function_id: FunctionId, session: SessionDep, _: CurrentUser, spec: SampleRange
) -> FastJSON:
    """Samples per instruction of the function in the range (offsets from its start), like perf annotate."""
    if await functions.get_host_function(session, host_id, function_id) is None:
        raise HTTPException(404, "Function not found")
    return FastJSON(await samples.instruction_samples(session, host_id, function_id, spec))
