# SPDX-License-Identifier: Apache-2.0
"""The plan's one schema (proto/hotpath/v1/plan.schema.json) and the pydantic models generated from it
(app/gen/plan.py, by app/protocol/schema_gen.py) say the same thing: the real plan of tests/fixtures accepted by
both, and each of a set of broken plans refused by both; the built module is what the schema generates
now; and the generator refuses a schema keyword it does not understand instead of dropping it."""

import copy
import json
from pathlib import Path

import jsonschema_rs
import pytest
from pydantic import ValidationError

from app.gen import plan as gen_plan
from app.protocol import schema_gen

REPO = Path(__file__).resolve().parents[3]
SCHEMA_PATH = REPO / "proto" / "hotpath" / "v1" / "plan.schema.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "plan_group.json").read_text())


def _both(plan: dict) -> tuple[bool, bool]:
    try:
        gen_plan.Plan.model_validate(plan)
        model_ok = True
    except ValidationError:
        model_ok = False
    return jsonschema_rs.validator_for(SCHEMA).is_valid(plan), model_ok


def _set(path: str, value):
    def change(p: dict) -> None:
        *head, last = path.split(".")
        node = p
        for k in head:
            node = node[int(k)] if isinstance(node, list) else node[k]
        if value is _DELETE:
            del node[last]
        else:
            node[int(last) if isinstance(node, list) else last] = value

    return change


_DELETE = object()
BROKEN = {
    "no root": _set("root", _DELETE),
    "an empty root": _set("root", ""),
    "an unknown status": _set("status", "maybe"),
    "no target": _set("target", _DELETE),
    "an unknown target kind": _set("target.kind", "vm"),
    "a pid of 0": _set("target.pid", 0),
    "an address that is not hex": _set("group.0.address", "4096"),
    "a negative block count": _set("group.0.layout.0.count", -1),
    "a chain below -1": _set("group.0.layout.0.chain", -2),
    "a block size past 4 GiB": _set("group.0.layout.0.size", (1 << 32) + 1),
    "a hot flag that is a string": _set("group.0.layout.0.hot", "yes"),
    "a member without its layout": _set("group.0.layout", _DELETE),
    "an edge from an unknown source": _set("group.0.edge_counts.0.source", "guessed"),
    "a way of 256": _set("icache_after.cells.0.way", 256),
    "no I-cache sets": _set("icache_after.sets", 0),
    "a code hash in capitals": _set("code.sha256", "A" * 64),
    "code hex of an odd length": _set("code.hex", "abc"),
    "a relocation without a target": _set("code.relocations.0.target", _DELETE),
    "totals without functions": _set("totals.functions", _DELETE),
    "a kept function without a rule": lambda p: p["kept_in_place"].append({"function": "f", "address": "0x1"}),
}


def test_the_real_plan_is_valid_by_the_schema_and_by_the_generated_models():
    assert _both(FIXTURE) == (True, True)
    assert FIXTURE["group"][0]["edge_counts"] and FIXTURE["code"]["relocations"]


def test_members_the_agent_adds_later_are_kept_by_both():
    plan = copy.deepcopy(FIXTURE)
    plan["a_later_member"] = {"x": 1}
    plan["group"][0]["layout"][0]["later"] = [1, 2]
    assert _both(plan) == (True, True)
    dumped = gen_plan.Plan.model_validate(plan).model_dump(by_alias=True, exclude_unset=True)
    assert dumped["a_later_member"] == {"x": 1} and dumped["group"][0]["layout"][0]["later"] == [1, 2]
    assert "from" in dumped["group"][0]["edge_counts"][0]


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_plan_is_refused_by_the_schema_and_by_the_generated_models(name):
    plan = copy.deepcopy(FIXTURE)
    BROKEN[name](plan)
    assert _both(plan) == (False, False)


def test_the_built_models_are_what_the_schema_generates_now():
    assert Path(gen_plan.__file__).read_text() == schema_gen.generate(SCHEMA, "proto/hotpath/v1/plan.schema.json")


@pytest.mark.parametrize(
    "node",
    [
        {"type": "object", "oneOf": []},
        {"type": "object", "properties": {"a": {"type": "string", "format": "uri"}}},
        {"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}},
        {"type": "object", "required": ["a"]},
    ],
)
def test_the_generator_refuses_what_it_does_not_understand(node):
    with pytest.raises(schema_gen.SchemaError):
        schema_gen.generate({"$defs": {"X": node}}, "x")
