# SPDX-License-Identifier: Apache-2.0
"""Layout candidates: a target's functions ranked by what re-layout could gain (app.domain.layout_candidates)."""

import uuid
from typing import Literal

from pydantic import BaseModel, Field

from app.api.schemas.common import RangePublic
from app.api.schemas.hosts import CacheGeometry


class KeptRule(BaseModel):
    """Why a function cannot move: a rule one of the target's plans recorded, or the catalog's."""

    plan_id: uuid.UUID | None = Field(description="The plan that kept it in place; null: the catalog's reason")
    rule: str
    detail: str


class LayoutCandidate(BaseModel):
    function_id: int
    name: str
    module: str
    digest: str
    function_index: int
    address: int
    address_hex: str
    size: int
    samples: int | None = Field(description="Samples in the range (the idle task's left out); null for a process")
    share: float | None = Field(description="Share of all the host's samples in the range; null for a process")
    counted_share: float | None = Field(
        description="A process's functions: share of the instructions executed by the target's functions "
        "measured with their blocks (block count × its instructions); null for the kernel"
    )
    measurement_id: str | None = Field(description="The newest exact block-count measurement used, if any")
    hot_basis: Literal["samples", "exact_counts"] = Field(
        description="What made a block hot: samples in the range, or the measurement's exact counts"
    )
    hot_blocks: int
    blocks: int
    hot_bytes: int
    hot_jumps: int = Field(description="Hot blocks that end in a jump (taken, tail-call or indirect successor)")
    branch_density: float | None = Field(description="Jumps per 64 bytes of hot code")
    hot_lines: int | None = Field(description="L1i lines the hot blocks touch at the function's address")
    minimum_lines: int | None = Field(description="The fewest lines the hot bytes could fill")
    l1i_lines: int | None = Field(description="Lines of the host's L1i")
    l1i_share: float | None = Field(description="hot_lines / l1i_lines")
    taken_share: float | None = Field(description="Of the hot jumps' executions (exact edges), the share that jumped")
    jump_executions: int | None
    movable: bool
    kept: KeptRule | None
    unavailable: list[str] = Field(description="Figures that are null, and why")
    score: float | None = Field(
        description="weight (share, else counted_share) × hot_lines × branch_density × (taken_share or 1): "
        "a heuristic ranking, not a predicted gain"
    )
    reason: str = Field(description="One line: the figures behind the rank")


class LayoutCandidates(RangePublic):
    target_id: str
    weight: Literal["samples", "exact_counts"]
    l1i: CacheGeometry | None
    total_samples: int | None
    items: list[LayoutCandidate]
