# SPDX-License-Identifier: Apache-2.0
"""Sample reads: totals, top functions, hotness, timelines and comparisons."""

from datetime import datetime

from pydantic import BaseModel, Field

from app.api.schemas.common import RangePublic


class SampleTotals(BaseModel):
    """Whole-host totals of a range. kernel = total − user; idle is the part of kernel spent in the idle
    loop; unmapped is kernel samples outside any known function; lost is what the sampler dropped."""

    total_samples: int
    user_samples: int
    kernel_samples: int
    idle_samples: int
    unmapped_samples: int
    lost_samples: int
    stack_samples: int = Field(
        0, description="Samples whose call stack is stored (the base of inclusive counts and flame graphs)"
    )


class TopFunctionItem(BaseModel):
    function_id: int
    name: str
    module: str
    address: int | None
    address_hex: str | None
    samples: int
    samples_per_sec: float
    share: float = Field(description="Share of all samples of the host in the range (kernel and user)")
    idle: bool = Field(
        description="Most of its samples were the idle task's (those are left out of rankings unless include_idle)"
    )
    inclusive_samples: int | None = Field(
        None,
        description="Samples whose call stack contains the function "
        "(itself or anything it called); null when the range has "
        "no stacks",
    )


class TopFunctions(RangePublic, SampleTotals):
    window_s: int
    functions: int = Field(description="How many functions had samples (the rows there are to page through)")
    items: list[TopFunctionItem]


class HotnessItem(BaseModel):
    function_id: int
    samples_per_sec: float


class Hotness(RangePublic):
    window_s: int
    items: list[HotnessItem]


class TimelinePoint(BaseModel):
    t: datetime = Field(description="Start of the bucket")
    seconds: float = Field(description="Sampled seconds in the bucket (intervals the host reported)")
    total: int
    user: int
    kernel: int
    idle: int
    unmapped: int


class Timeline(RangePublic):
    step_s: int
    points: list[TimelinePoint]


class CompareSide(RangePublic, SampleTotals):
    host_id: str


class CompareItem(BaseModel):
    name: str
    module: str
    idle: bool
    a_function_id: int | None
    b_function_id: int | None
    a_samples: int
    b_samples: int
    a_per_sec: float
    b_per_sec: float
    delta_per_sec: float = Field(description="b_per_sec − a_per_sec")
    a_share: float
    b_share: float


class Comparison(BaseModel):
    a: CompareSide
    b: CompareSide
    functions: int
    items: list[CompareItem]
