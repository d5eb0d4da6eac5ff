# SPDX-License-Identifier: Apache-2.0
"""Test data made by the agent stays what the agent in this build writes: tests/fixtures/plan_group.json
(the real plan the scripted agent answers MakePlan with) must have every member, at every level, that a
plan from agent/build/hotpathd has, and no member it no longer writes. The fresh plan is made offline
(`hotpathd plan elf` of hotpathd's own hp_profile_find from a one-block profile, no root needed); only
the target's kind-specific members (pid, start_time of a process target) may differ. When this fails,
regenerate the fixture with tests/fixtures/make_plan_group.sh."""

import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HOTPATHD = REPO / "agent" / "build" / "hotpathd"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "plan_group.json"
PROCESS_ONLY = {".target.pid", ".target.start_time"}


def _shape(x):
    """Member names and value types, lists merged over their elements."""
    if isinstance(x, dict):
        return {k: _shape(v) for k, v in x.items()}
    if isinstance(x, list):
        merged: dict = {}
        for e in x:
            s = _shape(e)
            if isinstance(s, dict):
                merged.update(s)
        return [merged] if merged else []
    return "number" if isinstance(x, int | float) and not isinstance(x, bool) else type(x).__name__


def _differences(fixture, fresh, path=""):
    if isinstance(fixture, dict) and isinstance(fresh, dict):
        for k in sorted(set(fixture) | set(fresh)):
            where = f"{path}.{k}"
            if k not in fixture:
                yield f"{where}: the agent writes it, the fixture lacks it"
            elif k not in fresh:
                if where not in PROCESS_ONLY:
                    yield f"{where}: in the fixture, the agent no longer writes it"
            else:
                yield from _differences(fixture[k], fresh[k], where)
    elif isinstance(fixture, list) and isinstance(fresh, list):
        if fixture and fresh:
            yield from _differences(fixture[0], fresh[0], path + "[]")
    elif fixture != fresh and "NoneType" not in (fixture, fresh):
        yield f"{path}: {fixture} in the fixture, {fresh} from the agent"


def _fresh_plan(tmp_path: Path) -> dict:
    if not HOTPATHD.exists():
        pytest.fail(f"{HOTPATHD} is missing: `make build` (or `make -C agent`) builds it")
    root = "hp_profile_find"
    nm = subprocess.run(["nm", str(HOTPATHD)], capture_output=True, text=True, check=True).stdout
    addr = next(f"0x{line.split()[0]}" for line in nm.splitlines() if line.endswith(f" {root}"))
    profile = tmp_path / "measure.json"
    profile.write_text(
        json.dumps(
            {
                "resources": [
                    {"function": root, "block": addr, "metrics": {"count": 12}, "labels": {"count": "exact"}}
                ],
                "edges": [{"from": None, "to": addr, "count": 12, "exact": True}],
            }
        )
    )
    p = subprocess.run(
        [str(HOTPATHD), "plan", "elf", str(HOTPATHD), root, "--profile", str(profile), "--l1i", "32768,8,64", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    plan = json.loads(p.stdout)
    assert plan["status"] == "ok" and plan["code"]["verified"]
    return plan


def test_plan_fixture_has_the_shape_this_builds_agent_writes(tmp_path):
    fixture = json.loads(FIXTURE.read_text())
    assert fixture["status"] == "ok" and fixture["target"]["kind"] == "pid" and len(fixture["group"]) > 1
    problems = list(_differences(_shape(fixture), _shape(_fresh_plan(tmp_path))))
    assert not problems, (
        "tests/fixtures/plan_group.json is stale (regenerate it with "
        "tests/fixtures/make_plan_group.sh):\n" + "\n".join(problems)
    )
