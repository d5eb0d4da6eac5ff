# SPDX-License-Identifier: Apache-2.0
"""The interleaved comparison's statistics and the checks of the agent's windows (app.domain.compare_stats),
on fixed windows whose figures are worked out by hand here."""

import copy
import math

import pytest

from app.domain import compare_stats
from app.domain.compare_stats import CompareInvalid, check, summarize
from tests.grpc.test_plans import _set as _edit  # one way to set a value at a path of a JSON answer

PLAN = "3f1e1c1a-0000-4000-8000-000000000001"


def windows(in_plan, samples=1000):
    """Windows in the contract's order (pair 0 original first, pair 1 installed first, ...) from per pair
    (original, installed) samples in the plan's code."""
    out, t = [], 1_795_447_187_801_392_172
    for pair, counts in enumerate(in_plan):
        n = samples if isinstance(samples, int) else samples[pair]
        for arm in ("original", "installed") if pair % 2 == 0 else ("installed", "original"):
            out.append(
                {
                    "pair": pair,
                    "arm": arm,
                    "start_unix_ns": t,
                    "seconds": 1.001,
                    "samples": n[arm == "installed"] if isinstance(n, tuple) else n,
                    "samples_in_plan": counts[arm == "installed"],
                    "cpu_seconds": 1.98,
                }
            )
            t += 1_100_000_000
    return out


def answer(in_plan, **over):
    return {
        "id": PLAN,
        "pid": 1234,
        "root": "sqlite3BtreeInsert",
        "members": 17,
        "pairs": len(in_plan),
        "window_seconds": 1.0,
        "sample_hz": 997,
        "windows": windows(in_plan),
        "summary": {"verdict": "faster"},
        "toggle_ms": {"revert": 13.2, "install": 7.1},
        "state": "installed",
        **over,
    }


def test_the_summary_is_the_contracts_statistics_on_fixed_windows():
    # Shares: original 0.20 in every pair, installed 0.22, 0.24, 0.26: d = 0.02, 0.04, 0.06, mean 0.04,
    # sample sd 0.02; t(0.975, 2) = 4.3027; change 0.04 / 0.20 = +20%.
    s = summarize(windows([(200, 220), (200, 240), (200, 260)]))
    half = 4.3027 * 0.02 / math.sqrt(3)
    assert s["share_original"] == pytest.approx(0.2) and s["share_installed"] == pytest.approx(0.24)
    assert s["change"] == pytest.approx(0.2)
    assert s["interval"] == pytest.approx([(0.04 - half) / 0.2, (0.04 + half) / 0.2])
    assert s["verdict"] == "within_noise" and s["pairs_used"] == 3 and s["confidence"] == 0.95


def test_a_consistent_rise_is_slower_and_a_consistent_fall_faster():
    slower = summarize(windows([(200, 220), (200, 221), (200, 219), (200, 220)]))
    assert slower["verdict"] == "slower" and slower["interval"][0] > 0 and slower["change"] == pytest.approx(0.1)
    faster = summarize(windows([(200, 180), (200, 181), (200, 179), (200, 180)]))
    assert faster["verdict"] == "faster" and faster["interval"][1] < 0 and faster["change"] == pytest.approx(-0.1)
    assert compare_stats.guard_reason(slower, "reverted").startswith("guard: the plan's code took +10.0% of the")
    assert compare_stats.guard_reason(slower, "reverted").endswith("); reverted")


def test_a_window_without_samples_drops_its_pair_and_fewer_than_two_pairs_are_insufficient():
    ws = windows([(200, 220), (0, 0), (200, 240)], samples=[1000, (1000, 0), 1000])
    s = summarize(ws)
    assert s["pairs_used"] == 2 and s["share_installed"] == pytest.approx(0.23)
    assert [p["used"] for p in compare_stats.pair_shares(ws)] == [True, False, True]
    one = summarize(windows([(200, 220), (0, 0)], samples=[1000, (0, 1000)]))
    assert one["verdict"] == "insufficient" and one["change"] is None and one["interval"] is None
    assert one["pairs_used"] == 1 and one["share_original"] == pytest.approx(0.2)
    none_in_plan = summarize(windows([(0, 3), (0, 2)]))
    assert none_in_plan["verdict"] == "insufficient", "no share of the original: no relative change"


def test_the_t_table_is_students_quantile():
    assert compare_stats.T975[0] == 12.7062 and compare_stats.T975[5] == 2.4469 and compare_stats.T975[-1] == 2.0096
    assert len(compare_stats.T975) == 49 and list(compare_stats.T975) == sorted(compare_stats.T975, reverse=True)


def test_a_well_formed_answer_passes_and_its_summary_is_not_read():
    a = answer([(200, 220), (200, 240)])
    ws = check(a, PLAN, 2, 1.0, 1234)
    assert ws == a["windows"]
    a["summary"] = {"verdict": "slower", "change": 9.9}
    assert check(a, PLAN, 2, 1.0, 1234) == ws


def _swap_arms(a):
    a["windows"][2]["arm"], a["windows"][3]["arm"] = "original", "installed"


def _drop(key):
    def edit(a):
        del a["windows"][0][key]

    return edit


BROKEN = {
    "another install": (_edit(["id"], "other"), "not the plan"),
    "another pid": (_edit(["pid"], 99), "pid 99"),
    "fewer pairs": (_edit(["pairs"], 1), "1 pairs, 2 were asked"),
    "other window length": (_edit(["window_seconds"], 2.0), "of 2.0 s"),
    "left reverted": (_edit(["state"], "reverted"), "left the plan reverted"),
    "a window missing": (lambda a: a["windows"].pop(), "3 windows"),
    "no windows": (_edit(["windows"], None), "no list of windows"),
    "pairs out of order": (_edit(["windows", 2, "pair"], 0), "do not pair up"),
    "arms not alternating": (_swap_arms, "do not alternate"),
    "negative samples": (_edit(["windows", 1, "samples"], -1), "samples is not an integer"),
    "in plan above samples": (_edit(["windows", 1, "samples_in_plan"], 1001), "1001 samples in the plan"),
    "zero seconds": (_edit(["windows", 0, "seconds"], 0), "not a positive number"),
    "infinite cpu": (_edit(["windows", 0, "cpu_seconds"], float("inf")), "cpu_seconds"),
    "a boolean count": (_edit(["windows", 0, "samples"], True), "not an integer"),
    "a key missing": (_drop("cpu_seconds"), "is not {"),
    "time going back": (_edit(["windows", 3, "start_unix_ns"], 1), "starts before"),
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_malformed_or_inconsistent_windows_are_refused_with_the_reason(broken):
    edit, reason = BROKEN[broken]
    a = copy.deepcopy(answer([(200, 220), (200, 240)]))
    edit(a)
    with pytest.raises(CompareInvalid) as exc:
        check(a, PLAN, 2, 1.0, 1234)
    assert reason in str(exc.value), str(exc.value)


def test_only_an_installed_process_plan_is_compared():
    from types import SimpleNamespace

    from app.domain.plan_compare import not_comparable

    assert not_comparable(SimpleNamespace(target_id="p42-1000", state="installed")) is None
    assert "kernel installs are not compared" in not_comparable(SimpleNamespace(target_id="kernel", state="installed"))
    assert "only an installed plan" in not_comparable(SimpleNamespace(target_id="p42-1000", state="approved"))
