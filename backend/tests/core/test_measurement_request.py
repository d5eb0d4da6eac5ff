# SPDX-License-Identifier: Apache-2.0
"""The measurement request is one pydantic model (app.protocol.measurement_request.MeasurementRequest): the route's body
resolves to it, it is the start command's parameters and the stored request, and app.storage.measurements maps
it to and from the proto's StartMeasurement by field name. Its fields are the proto's, both ways, so a
field added on one side only fails here; a request survives the trip through the proto unchanged."""

import pytest

from app.api.schemas import MeasurementCreate
from app.protocol.measurement_request import MeasurementRequest, ResourceRequest
from app.protocol.proto import pb
from app.storage.measurements import request_from_pb, request_to_pb

D1, D2 = "a" * 64, "b" * 64


@pytest.mark.parametrize(
    ("model", "message"), [(MeasurementRequest, pb.StartMeasurement), (ResourceRequest, pb.ResourceRef)]
)
def test_the_models_fields_are_the_protos(model, message):
    assert set(model.model_fields) == {f.name for f in message.DESCRIPTOR.fields}


FULL = MeasurementRequest(
    measurement_id="m1",
    target="p42-7",
    metrics=["count", "wall"],
    resources=[
        ResourceRequest(digest=D1, function_index=3, kind="function", blocks=True),
        ResourceRequest(digest=D2, function_index=9, kind="block", offset=16),
        ResourceRequest(digest=D2, function_index=9, kind="address", offset=21),
    ],
    where_pid=42,
    where_comm="worker",
    where_cgroup="/a/b",
    interval_ms=500,
    allow_partial=True,
    sample_hz=997,
)
MINIMAL = MeasurementRequest(
    measurement_id="m2", target="kernel", metrics=["count"], resources=[ResourceRequest(digest=D1, function_index=0)]
)


@pytest.mark.parametrize("req", [FULL, MINIMAL], ids=["full", "minimal"])
def test_a_request_survives_the_proto_and_its_stored_json(req):
    m = request_to_pb(req)
    assert request_from_pb(m) == req
    assert request_to_pb(req.model_dump(mode="json")) == m
    assert pb.StartMeasurement.FromString(m.SerializeToString()) == m


def test_the_proto_carries_each_field():
    m = request_to_pb(FULL)
    assert (m.measurement_id, m.target, list(m.metrics)) == ("m1", "p42-7", ["count", "wall"])
    assert (m.where_pid, m.where_comm, m.where_cgroup, m.interval_ms, m.allow_partial, m.sample_hz) == (
        42,
        "worker",
        "/a/b",
        500,
        True,
        997,
    )
    assert [(r.digest, r.function_index, r.kind, r.offset, r.blocks) for r in m.resources] == [
        (D1, 3, pb.RESOURCE_KIND_FUNCTION, 0, True),
        (D2, 9, pb.RESOURCE_KIND_BLOCK, 16, False),
        (D2, 9, pb.RESOURCE_KIND_ADDRESS, 21, False),
    ]
    unset = request_to_pb(MINIMAL)
    assert (unset.where_pid, unset.where_comm, unset.interval_ms, unset.sample_hz) == (0, "", 0, 0)


def test_the_routes_body_resolves_module_positions_and_repeated_metrics():
    body = MeasurementCreate.model_validate(
        {
            "target": "p42-7",
            "modules": [D1, D2],
            "metrics": ["count", "wall", "count"],
            "resources": [
                {"module": 1, "function_index": 9, "kind": "block", "offset": 16},
                {"digest": D1, "function_index": 3, "blocks": True},
            ],
            "where_pid": 42,
            "interval_ms": 500,
            "allow_partial": True,
        }
    )
    assert body.request("m1") == MeasurementRequest(
        measurement_id="m1",
        target="p42-7",
        metrics=["count", "wall"],
        resources=[
            ResourceRequest(digest=D2, function_index=9, kind="block", offset=16),
            ResourceRequest(digest=D1, function_index=3, blocks=True),
        ],
        where_pid=42,
        interval_ms=500,
        allow_partial=True,
    )
