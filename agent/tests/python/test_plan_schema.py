# SPDX-License-Identifier: Apache-2.0
"""The agent against the plan's schema (proto/hotpath/v1/plan.schema.json): the JSON `hotpathd plan`
writes (a fresh plan, made offline from a one-block profile of hotpathd's own hp_profile_find, and the
plan fixture the backend's tests replay, made from the group fixture) is valid by the schema; every
member the installer's reader (agent/src/replace/plan_file.c) reads is a member the schema describes;
and a plan cut down to the schema's members alone is read by the installer as the whole plan is (it
gets as far, and stops at the same check), while a cut plan lacking a member the installer needs is
refused by its reader. No root needed: nothing is installed."""

import importlib.util
import json
import pathlib
import re
import subprocess

import jsonschema_rs
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
HOTPATHD = ROOT / "agent" / "build" / "hotpathd"
SCHEMA = json.loads((ROOT / "proto" / "hotpath" / "v1" / "plan.schema.json").read_text())
PLAN_FILE_C = ROOT / "agent" / "src" / "replace" / "plan_file.c"
FIXTURE = ROOT / "backend" / "tests" / "fixtures" / "plan_group.json"


def _backend_test_helper(name: str):
    """A helper of the backend's tests, loaded from its file (the backend's tests are no package here)."""
    path = ROOT / "backend" / "tests" / "core" / "test_fixtures.py"
    spec = importlib.util.spec_from_file_location("backend_test_fixtures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


@pytest.fixture(scope="module")
def fresh_plan(tmp_path_factory) -> dict:
    """The plan the backend's fixture test makes: offline, from a one-block profile of hp_profile_find."""
    return _backend_test_helper("_fresh_plan")(tmp_path_factory.mktemp("plan-schema"))


def _errors(plan: dict) -> list[str]:
    return [
        f"{'/'.join(map(str, e.instance_path))}: {e.message}"
        for e in jsonschema_rs.validator_for(SCHEMA).iter_errors(plan)
    ]


def _node(ref_or_node: dict) -> dict:
    return SCHEMA["$defs"][ref_or_node["$ref"].removeprefix("#/$defs/")] if "$ref" in ref_or_node else ref_or_node


def _schema_only(value, node: dict):
    """The value with only the members the schema describes, at every level."""
    node = _node(node)
    if isinstance(value, dict) and "properties" in node:
        return {k: _schema_only(v, node["properties"][k]) for k, v in value.items() if k in node["properties"]}
    if isinstance(value, list) and "items" in node:
        return [_schema_only(v, node["items"]) for v in value]
    return value


def _install_answer(plan: dict, tmp_path: pathlib.Path) -> tuple[int, str]:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    p = subprocess.run(
        [str(HOTPATHD), "install", str(path), "--state-dir", str(tmp_path / "state"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return p.returncode, p.stderr.replace(str(path), "PLAN")


def test_the_plan_hotpathd_writes_is_valid_by_the_schema(fresh_plan):
    assert _errors(fresh_plan) == []


def test_the_plan_fixture_made_by_hotpathd_is_valid_by_the_schema():
    assert _errors(json.loads(FIXTURE.read_text())) == []


def test_every_member_the_installer_reads_is_described_by_the_schema():
    read = set(re.findall(r'json_object_get\(\s*\w+,\s*"([a-z_0-9]+)"\)', PLAN_FILE_C.read_text()))
    described = {k for d in SCHEMA["$defs"].values() for k in d.get("properties", {})}
    assert len(read) > 10, "plan_file.c no longer reads members with json_object_get: update this test"
    assert read - described == set()


def test_a_plan_of_the_schemas_members_alone_is_read_by_the_installer_as_the_whole_plan(fresh_plan, tmp_path):
    cut = _schema_only(fresh_plan, SCHEMA["$defs"]["Plan"])
    assert cut != fresh_plan and _errors(cut) == []
    whole = _install_answer(fresh_plan, tmp_path)
    # The plan is for a file, not a process: the installer reads it whole, then asks for a process.
    assert whole[0] == 1 and "the plan names no process" in whole[1]
    assert _install_answer(cut, tmp_path) == whole
    del cut["code"]["hex"]
    refused = _install_answer(cut, tmp_path)
    assert refused[0] == 5 and "PLAN: the plan has no code" in refused[1]
