# SPDX-License-Identifier: Apache-2.0
"""Hosts known to the backend, their loaded modules, and their sample windows (top functions and
per-function hotness)."""
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query

from app import crud
from app.api.deps import CurrentUser, SessionDep
from app.api.responses import NOT_FOUND, FastJSON
from app.schemas import HostPublic, Hotness, ModulePublic, Timeline, TopFunctions

router = APIRouter(prefix="/hosts", tags=["hosts"])
HostId = Annotated[str, Path(min_length=1, max_length=256, description="The host id its agent reports")]
WindowS = Query(10, ge=1, le=86400, description="Length of the window in seconds, ending at the newest interval")


async def require_host(session, host_id: str) -> None:
    if not await crud.host_exists(session, host_id):
        raise HTTPException(404, "Host not found")


@router.get("", response_model=list[HostPublic])
async def list_hosts(session: SessionDep, _: CurrentUser):
    """Every host that has ever connected, online or not."""
    return FastJSON(await crud.list_hosts(session))


@router.get("/{host_id}", response_model=HostPublic, responses=NOT_FOUND)
async def get_host(host_id: HostId, session: SessionDep, _: CurrentUser):
    """One host."""
    host = await crud.get_host_public(session, host_id)
    if host is None:
        raise HTTPException(404, "Host not found")
    return FastJSON(host)


@router.get("/{host_id}/modules", response_model=list[ModulePublic], responses=NOT_FOUND)
async def list_modules(host_id: HostId, session: SessionDep, _: CurrentUser):
    """The code modules loaded on a host, with whether their catalog is stored."""
    await require_host(session, host_id)
    return FastJSON(await crud.list_modules(session, host_id))


@router.get("/{host_id}/top-functions", response_model=TopFunctions, responses=NOT_FOUND)
async def top_functions(host_id: HostId, session: SessionDep, _: CurrentUser, window_s: int = WindowS,
                        limit: int = Query(50, ge=1, le=10000)):
    """The functions with the most samples in the window, most first."""
    await require_host(session, host_id)
    return FastJSON(await crud.top_functions(session, host_id, window_s, limit))


@router.get("/{host_id}/hotness", response_model=Hotness, responses=NOT_FOUND)
async def hotness(host_id: HostId, session: SessionDep, _: CurrentUser, window_s: int = WindowS):
    """Samples per second of every function that had samples in the window."""
    await require_host(session, host_id)
    return FastJSON(await crud.hotness(session, host_id, window_s))


@router.get("/{host_id}/timeline", response_model=Timeline, responses=NOT_FOUND)
async def timeline(host_id: HostId, session: SessionDep, _: CurrentUser,
                   window_s: int = Query(3600, ge=60, le=86400, description="Length of the period, ending now"),
                   buckets: int = Query(120, ge=10, le=1000)):
    """How much of each stretch of the recent period has data, and the gaps recorded in it."""
    await require_host(session, host_id)
    return FastJSON(await crud.timeline(session, host_id, window_s, buckets))
