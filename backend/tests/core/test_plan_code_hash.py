# SPDX-License-Identifier: Apache-2.0
"""The backend recomputes a plan's code hash in the agent's canonical form (plan/identity.c), and that
form includes each relocation's kind: a promoted indirect call's compare slot is an `abs64` relocation, a
label table's entry in the copy a `code64` one (an address inside the code, moved with it).
The plans here are real: this build's hotpathd plans the indirect-call fixture (agent/tests/fixtures/icall.c,
gcc -O2 -fPIE -pie) offline as a hot set, with a value profile that promotes ic_run's first indirect call
to ic_add (no root or process needed), and the label-table fixture (agent/tests/fixtures/labels.c, the same
flags) whose lb_run dispatches through a computed goto; only their target is then given a process's
identity, as the scripted agent's fixture is."""

import copy
import json
import subprocess
from pathlib import Path

import pytest

from app.domain import plan_check
from app.gen.plan import Plan

REPO = Path(__file__).resolve().parents[3]
HOTPATHD = REPO / "agent" / "build" / "hotpathd"
FIXTURES = REPO / "agent" / "tests" / "fixtures"
FIXTURE_C = FIXTURES / "icall.c"
FUNCTIONS = ("ic_run", "ic_via", "ic_add", "ic_mul")


def _run(*args: str, cwd: Path) -> str:
    p = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=cwd)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def _compiled_and_counted(tmp: Path, source: Path, binary: str, functions: tuple[str, ...]) -> dict[str, dict]:
    """SOURCE built -O2 -fPIE -pie as TMP/BINARY, and a profile (TMP/prof.json) counting every block of
    FUNCTIONS 1000 times; each function's `hotpathd inspect --json`, by name."""
    if not HOTPATHD.exists():
        pytest.fail(f"{HOTPATHD} is missing: `make build` (or `make -C agent`) builds it")
    _run("gcc", "-O2", "-fPIE", "-pie", "-o", binary, str(source), cwd=tmp)
    resources, seen = [], {}
    for fn in functions:
        d = seen[fn] = json.loads(_run(str(HOTPATHD), "inspect", "elf", f"./{binary}", fn, "--json", cwd=tmp))
        resources += [
            {"function": fn, "block": hex(b["start"]), "metrics": {"count": 1000}, "labels": {"count": "exact"}}
            for b in d["blocks"]
        ]
    (tmp / "prof.json").write_text(json.dumps({"resources": resources, "edges": []}))
    return seen


@pytest.fixture(scope="module")
def promoted(tmp_path_factory) -> tuple[dict, int]:
    """A verified hot-set plan with one promoted call, as JSON, and ic_add's address."""
    tmp = tmp_path_factory.mktemp("icall")
    seen = _compiled_and_counted(tmp, FIXTURE_C, "icall", FUNCTIONS)
    addr = {fn: d["function"]["address"] for fn, d in seen.items()}
    sites = {fn: d["indirect_call_sites"] for fn, d in seen.items()}
    assert sites["ic_run"], "the fixture's ic_run has no indirect call"
    site = sites["ic_run"][0] - addr["ic_run"]
    (tmp / "icalls.json").write_text(
        json.dumps(
            {
                "sites": [
                    {
                        "function": "ic_run",
                        "site": hex(site),
                        "calls": 1000,
                        "targets": [{"function": "ic_add", "count": 1000}],
                    }
                ]
            }
        )
    )
    args = "plan elf ./icall --hot-set --profile prof.json --icall-targets icalls.json --l1i 32768,8,64 --json"
    plan = json.loads(_run(str(HOTPATHD), *args.split(), cwd=tmp))
    assert plan["status"] == "ok" and plan["code"]["verified"], plan.get("message")
    plan["target"].update(kind="pid", pid=4711, start_time=1154307)
    return plan, addr["ic_add"]


def _check(plan: dict) -> None:
    plan_check.check(
        json.dumps(plan),
        root_name=None,
        target_id="p4711-1154307",
        code_sha256=plan["code"]["sha256"],
        build_id=plan["target"]["module_build_id"],
        max_bytes=1 << 24,
    )


def test_a_promoted_plans_code_hash_is_the_agents(promoted):
    plan, ic_add = promoted
    abs64 = [r for r in plan["code"]["relocations"] if r.get("kind") == "abs64"]
    assert plan["totals"]["promoted_calls"] == 1
    assert [int(r["target"], 16) for r in abs64] == [ic_add]
    assert plan_check.code_hash(Plan.model_validate(plan).code) == plan["code"]["sha256"]
    _check(plan)


def test_a_relocation_whose_kind_was_changed_is_refused(promoted):
    plan = copy.deepcopy(promoted[0])
    for r in plan["code"]["relocations"]:
        if r.get("kind") == "abs64":
            r["kind"] = "rel32"
    with pytest.raises(plan_check.PlanInvalid, match="hashes to"):
        _check(plan)


def test_an_abs64_relocation_past_the_codes_end_is_refused(promoted):
    plan = copy.deepcopy(promoted[0])
    r = next(r for r in plan["code"]["relocations"] if r.get("kind") == "abs64")
    r["offset"] = plan["code"]["bytes"] - 4  # 4 bytes would fit; its 8 do not
    with pytest.raises(plan_check.PlanInvalid, match="lies outside the code"):
        _check(plan)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> dict:
    """A verified hot-set plan of lb_run, whose computed goto's label table the copy re-emits."""
    tmp = tmp_path_factory.mktemp("labels")
    _compiled_and_counted(tmp, FIXTURES / "labels.c", "labels", ("lb_run",))
    args = "plan elf ./labels --hot-set --profile prof.json --l1i 32768,8,64 --json"
    plan = json.loads(_run(str(HOTPATHD), *args.split(), cwd=tmp))
    assert plan["status"] == "ok" and plan["code"]["verified"], plan.get("message")
    plan["target"].update(kind="pid", pid=4711, start_time=1154307)
    return plan


def test_a_label_tables_entries_are_code64_relocations_inside_the_code(labelled):
    code = labelled["code"]
    base = int(code["base"], 16)
    code64 = [r for r in code["relocations"] if r.get("kind") == "code64"]
    # lb_run's table: its 10 labels (the run of words that land in lb_run may be longer, never shorter)
    assert len(code64) >= 10
    assert all(base <= int(r["target"], 16) < base + code["bytes"] for r in code64)
    assert plan_check.code_hash(Plan.model_validate(labelled).code) == code["sha256"]
    _check(labelled)


def test_a_code64_relocation_naming_an_address_outside_the_code_is_refused(labelled):
    plan = copy.deepcopy(labelled)
    r = next(r for r in plan["code"]["relocations"] if r.get("kind") == "code64")
    r["target"] = hex(int(plan["code"]["base"], 16) + plan["code"]["bytes"])
    with pytest.raises(plan_check.PlanInvalid, match="not in the code"):
        _check(plan)


def test_a_code64_relocation_turned_abs64_is_refused(labelled):
    plan = copy.deepcopy(labelled)
    next(r for r in plan["code"]["relocations"] if r.get("kind") == "code64")["kind"] = "abs64"
    with pytest.raises(plan_check.PlanInvalid, match="hashes to"):
        _check(plan)
