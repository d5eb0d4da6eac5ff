# SPDX-License-Identifier: Apache-2.0
"""A target's layout candidates: its functions ranked by what re-laying them out could gain, with the
figures behind each rank (app.domain.layout_candidates). A heuristic ranking, not a predicted gain."""

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query

from app.api.deps import CurrentUser, SessionDep, read_across_nodes
from app.api.ranges import BAD_RANGE, SampleRange
from app.api.responses import NOT_FOUND, FastJSON
from app.api.routes.hosts import ExistingHost
from app.api.schemas import LayoutCandidates
from app.domain import layout_candidates
from app.storage import targets

# Read only: the host's samples from its database node.
router = APIRouter(
    prefix="/hosts/{host_id}/targets/{target_id}", tags=["layout"], dependencies=[Depends(read_across_nodes)]
)
TargetId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^(kernel|p[0-9]{1,10}-[0-9]{1,20})$")]


@router.get("/layout-candidates", response_model=LayoutCandidates, responses={**NOT_FOUND, **BAD_RANGE})
async def list_layout_candidates(
    host_id: ExistingHost,
    target_id: TargetId,
    session: SessionDep,
    _: CurrentUser,
    spec: SampleRange,
    limit: int = Query(50, ge=1, le=500, description="At most this many functions (the kernel: the most sampled)"),
) -> FastJSON:
    """The target's functions ranked by an explained score: sampled share (a process: share of the measured
    functions' executed instructions), hot footprint against the L1i, branch density, taken-branch share."""
    if target_id != "kernel" and await targets.target_exists(session, host_id, target_id) is None:
        raise HTTPException(404, "Target not found")
    return FastJSON(await layout_candidates.rank(session, host_id, target_id, spec, limit))
