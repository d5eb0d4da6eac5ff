# SPDX-License-Identifier: Apache-2.0
"""A host's functions: search and paging over the whole catalog, one function's blocks and calls, its
samples per block, and its instructions (decoded by the host's agent once per build, then cached)."""

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response

from app.api.deps import CurrentUser, RuntimeDep, SessionDep, read_across_nodes
from app.api.ranges import BAD_RANGE, SampleRange
from app.api.responses import NOT_FOUND, FastJSON
from app.api.routes.hosts import ExistingHost
from app.api.schemas import FunctionDetail, FunctionSamples, FunctionsPage, InstructionsPublic, Message
from app.domain.commands import CommandFailed, CommandTimeout, HostOffline
from app.storage import functions, samples
from app.storage.models import hex64

router = APIRouter(prefix="/hosts/{host_id}/functions", tags=["functions"])
FunctionId = Annotated[int, Path(ge=1, le=2**63 - 1, description="A function's id in this backend")]
TargetQuery = Query(
    "kernel",
    min_length=1,
    max_length=64,
    pattern=r"^(kernel|p[0-9]{1,10}-[0-9]{1,20})$",
    description="The target whose modules are meant: the kernel, or an attached process",
)


@router.get("", response_model=FunctionsPage, responses={**NOT_FOUND, **BAD_RANGE})
async def list_functions(
    host_id: ExistingHost,
    session: SessionDep,
    _: CurrentUser,
    spec: SampleRange,
    q: str | None = Query(None, max_length=256, description="Case-insensitive substring of the name"),
    module: str | None = Query(None, max_length=4096),
    sort: Literal["name", "address", "hotness", "blocks"] = "name",
    offset: int = Query(0, ge=0, le=2**31 - 1),
    limit: int = Query(100, ge=1, le=100000),
    target: str = TargetQuery,
) -> Response:
    """Search and page through a host's functions; exact name matches come first."""
    body = await functions.functions_page(session, host_id, q or None, module, sort, spec, offset, limit, target)
    return Response(body, media_type="application/json")


@router.get("/{function_id}", response_model=FunctionDetail, responses={**NOT_FOUND, **BAD_RANGE})
async def get_function(
    host_id: ExistingHost,
    function_id: FunctionId,
    session: SessionDep,
    _: CurrentUser,
    spec: SampleRange,
    target: str = TargetQuery,
) -> FastJSON:
    """A function with its basic blocks, successors and callees (at its address in the target)."""
    detail = await functions.function_detail(session, host_id, function_id, spec, target)
    if detail is None:
        raise HTTPException(404, "Function not found")
    return FastJSON(detail)


@router.get(
    "/{function_id}/samples",
    response_model=FunctionSamples,
    responses={**NOT_FOUND, **BAD_RANGE},
    dependencies=[Depends(read_across_nodes)],  # read only: from the host's database node
)
async def function_samples(
    host_id: ExistingHost, function_id: FunctionId, session: SessionDep, _: CurrentUser, spec: SampleRange
) -> FastJSON:
    """Samples per basic block of a function in the range."""
    if await functions.get_host_function(session, host_id, function_id) is None:
        raise HTTPException(404, "Function not found")
    return FastJSON(await samples.function_samples(session, host_id, function_id, spec))


@router.get(
    "/{function_id}/instructions",
    response_model=InstructionsPublic,
    responses={**NOT_FOUND, 502: {"model": Message}, 503: {"model": Message}, 504: {"model": Message}},
)
async def function_instructions(
    host_id: ExistingHost,
    function_id: FunctionId,
    session: SessionDep,
    runtime: RuntimeDep,
    user: CurrentUser,
    target: str = TargetQuery,
) -> FastJSON:
    """The instructions of a function, from the cache or decoded by the host's agent: the program's own
    code (the agent reads the bytes under any probe), with where a running measurement's probe sits."""
    fn = await functions.get_host_function(session, host_id, function_id, target)
    if fn is None:
        raise HTTPException(404, "Function not found")
    start = functions.summary_from_row(fn, 0.0)["address"]
    instructions = await functions.cached_instructions(session, fn.digest, fn.index)
    cached = instructions is not None
    if not cached:
        actor = user.username
        await session.rollback()  # do not hold a transaction open while the agent works
        try:
            instructions = await runtime.commands.inspect_function(host_id, target, fn.digest, fn.index, actor)
        except HostOffline:
            raise HTTPException(503, "Host is offline") from None
        except CommandTimeout:
            raise HTTPException(504, "The agent did not answer in time") from None
        except CommandFailed as exc:
            raise HTTPException(502, f"The agent could not decode the function: {exc}") from None
    assert instructions is not None
    probes = await functions.probe_offsets(session, host_id, target, fn.digest, fn.index)
    at = set(probes)
    out = []
    for off, length, hexbytes, text in instructions:
        addr = start + off
        out.append(
            {
                "offset": off,
                "address": addr,
                "address_hex": hex64(addr),
                "length": length,
                "bytes": hexbytes,
                "text": text,
                "probe": off in at,
            }
        )
    return FastJSON(
        {
            "function_id": function_id,
            "address": start,
            "address_hex": hex64(start),
            "cached": cached,
            "instructions": out,
            "probes": probes,
        }
    )
