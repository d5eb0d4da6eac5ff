# SPDX-License-Identifier: Apache-2.0
"""Functions: the catalog page, one function's detail and disassembly, its samples, catalog pieces."""

from typing import Literal

from pydantic import BaseModel, Field

from app.api.schemas.common import RangePublic

SuccessorKindName = Literal["fallthrough", "taken", "tail_call", "indirect", "return"]


class FunctionSummary(BaseModel):
    id: int
    name: str
    module: str
    digest: str = Field(description="The function's catalog piece (its identity in measurement requests)")
    index: int = Field(description="The function's index within its catalog piece")
    address: int
    address_hex: str
    size: int
    block_count: int
    samples_per_sec: float
    undecodable: bool


class FunctionsPage(BaseModel):
    total: int
    items: list[FunctionSummary]


class SuccessorPublic(BaseModel):
    kind: SuccessorKindName
    target_offset: int | None
    target_address: int | None
    target_address_hex: str | None
    target_name: str | None
    target_function_id: int | None


class BlockPublic(BaseModel):
    offset: int
    address: int
    address_hex: str
    size: int
    instruction_count: int
    successors: list[SuccessorPublic]


class CalleePublic(BaseModel):
    site_offset: int
    # null: a named callee in another module that is not found by name on this host (the catalog keeps no
    # address for it: the sending host's module placement is not this host's, and no digest covers it)
    target_address: int | None
    target_address_hex: str | None
    name: str | None
    module: str | None
    function_id: int | None


class FunctionDetail(BaseModel):
    function: FunctionSummary
    undecodable_offset: int | None
    blocks: list[BlockPublic]
    callees: list[CalleePublic]
    indirect_call_sites: list[int]


class InstructionPublic(BaseModel):
    offset: int
    address: int
    address_hex: str
    length: int
    bytes: str
    text: str
    probe: bool = Field(
        description="A running measurement's probe sits on this instruction (the bytes shown "
        "are the program's own, not the probe's int3)"
    )


class InstructionsPublic(BaseModel):
    function_id: int
    address: int
    address_hex: str
    cached: bool
    instructions: list[InstructionPublic]
    probes: list[int] = Field(
        description="Offsets where the host's armed or running measurements of this "
        "target have a probe in the function now"
    )


class BlockSamplesPublic(BaseModel):
    offset: int
    samples: int
    samples_per_sec: float


class FunctionSamples(RangePublic):
    function_id: int
    window_s: int
    total: int
    blocks: list[BlockSamplesPublic]


class CatalogPublic(BaseModel):
    """One content-addressed catalog piece (a module of one build) in columns, in address order.
    Offsets are relative to the module's base; add a host's base_address (GET /hosts/{id}/modules) for
    addresses. It never changes, so it is served with immutable caching."""

    digest: str
    module: str
    function_count: int
    ids: list[int]
    names: list[str]
    offsets: list[int]
    sizes: list[int]
    block_counts: list[int]
    undecodable: list[int] = Field(
        description="Positions (in these columns) of functions the agent could not decode whole"
    )
