# SPDX-License-Identifier: Apache-2.0
"""Hosts known to the backend and their loaded modules (with the catalog digest of each)."""

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query

from app.api.deps import AdminUser, CurrentUser, SessionDep, read_across_nodes
from app.api.responses import ADMIN_ONLY, NOT_FOUND, FastJSON
from app.api.schemas import DataCoverage, HostPublic, LabelsUpdate, ModulePublic
from app.storage import hosts, samples

router = APIRouter(prefix="/hosts", tags=["hosts"])
HostId = Annotated[str, Path(min_length=1, max_length=256, description="The host id its agent reports")]


async def existing_host(host_id: HostId, session: SessionDep, _: CurrentUser) -> str:
    """The path's host id, once the caller is signed in (401 first, so existence is not revealed) and
    the host is known (404 otherwise)."""
    if not await hosts.host_exists(session, host_id):
        raise HTTPException(404, "Host not found")
    return host_id


ExistingHost = Annotated[str, Depends(existing_host)]


@router.get("", response_model=list[HostPublic])
async def list_hosts(session: SessionDep, _: CurrentUser) -> FastJSON:
    """Every host that has ever connected, online or not."""
    return FastJSON(await hosts.list_hosts(session))


@router.get("/{host_id}", response_model=HostPublic, responses=NOT_FOUND)
async def get_host(host_id: HostId, session: SessionDep, _: CurrentUser) -> FastJSON:
    """One host."""
    host = await hosts.get_host_public(session, host_id)
    if host is None:
        raise HTTPException(404, "Host not found")
    return FastJSON(host)


@router.get("/{host_id}/modules", response_model=list[ModulePublic], responses=NOT_FOUND)
async def list_modules(
    host_id: ExistingHost,
    session: SessionDep,
    _: CurrentUser,
    target: str = Query(
        "kernel",
        min_length=1,
        max_length=64,
        pattern=r"^(kernel|p[0-9]{1,10}-[0-9]{1,20})$",
        description="The target: the kernel, or an attached process",
    ),
) -> FastJSON:
    """The code modules a host's target has loaded, with whether their catalog is stored."""
    return FastJSON(await hosts.list_modules(session, host_id, target))


@router.get(
    "/{host_id}/coverage",
    response_model=DataCoverage,
    responses=NOT_FOUND,
    dependencies=[Depends(read_across_nodes)],  # read only: from the host's database node
)
async def coverage(
    host_id: ExistingHost,
    session: SessionDep,
    _: CurrentUser,
    window_s: int = Query(3600, ge=60, le=86400, description="Length of the period, ending now"),
    buckets: int = Query(120, ge=10, le=1000),
) -> FastJSON:
    """How much of each stretch of the recent period has data, and the gaps recorded in it (data the
    agent had to drop, batches that never arrived, batches refused for the host's clock)."""
    return FastJSON(await samples.coverage(session, host_id, window_s, buckets))


@router.put(
    "/{host_id}/labels",
    response_model=HostPublic,
    responses={**NOT_FOUND, **ADMIN_ONLY, 422: {"description": "A label breaks the label rules"}},
)
async def set_labels(host_id: ExistingHost, body: LabelsUpdate, session: SessionDep, admin: AdminUser) -> FastJSON:
    """Replace a host's labels (admin; audited). Its agent's reports no longer change them until they are
    reset with `labels: null`, which makes them the agent's again."""
    await hosts.set_labels(session, host_id, body.labels, admin.username)
    return FastJSON(await hosts.get_host_public(session, host_id))
