# SPDX-License-Identifier: Apache-2.0
"""A measurement as the backend asks an agent for it: the start command's parameters, the stored
request, and the proto's StartMeasurement (app.storage.measurements maps it field by field of the same
name; a proto zero is None here where a field may be None). The REST body (app.api.schemas'
MeasurementCreate) checks what a user may ask and turns into this; a test keeps these fields the
proto's."""

from typing import Literal

from pydantic import BaseModel


class ResourceRequest(BaseModel):
    """A resource of a measurement request (the proto's ResourceRef): its module by catalog digest."""

    digest: str
    function_index: int
    kind: Literal["function", "block", "address"] = "function"
    offset: int = 0
    blocks: bool = False


class MeasurementRequest(BaseModel):
    measurement_id: str
    target: str
    metrics: list[str]
    resources: list[ResourceRequest]
    where_pid: int | None = None
    where_comm: str | None = None
    where_cgroup: str | None = None
    interval_ms: int | None = None
    allow_partial: bool = False
    sample_hz: int | None = None
