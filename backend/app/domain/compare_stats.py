# SPDX-License-Identifier: Apache-2.0
"""The interleaved before/after of an installed plan (issue 17 item 5): the agent's ComparePlan answer
checked window by window, and its summary computed here from the windows, never taken from the agent.

The agent (`hotpathd compare`, the daemon's ComparePlan) runs `pairs` pairs of windows, one with the plan
reverted (arm "original") and one with it installed (arm "installed"), the order alternating pair by pair
(pair 0 original first, pair 1 installed first, ...), and counts in each window the process's PC samples
and those in the plan's code. The measure is that share: the workload runs uninstrumented, and less of its
time in the plan's code is the gain (docs/decisions.md). Per pair i, s_o(i) and s_n(i) are the shares of
its original and installed windows and d(i) = s_n(i) - s_o(i); over the n usable pairs (a window without
samples drops its pair), change = mean d / mean s_o and its 95% interval is (mean d ± t(0.975, n-1) ·
sd(d) / √n) / mean s_o (Student's t). Negative is good. The answer's shape is CompareResult's detail_json
(proto/hotpath/v1/agent.proto), the JSON of `hotpathd compare --json`.
"""

import math
from typing import Any

ARMS = ("original", "installed")
CONFIDENCE = 0.95
# Student's t quantile t(0.975, df) for df = 1..49, computed to 4 decimals with mpmath's regularized
# incomplete beta (12.7062 for df 1, 2.0096 for df 49, as the printed tables give).
T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
    2.0395, 2.0369, 2.0345, 2.0322, 2.0301, 2.0281, 2.0262, 2.0244, 2.0227, 2.0211,
    2.0195, 2.0181, 2.0167, 2.0154, 2.0141, 2.0129, 2.0117, 2.0106, 2.0096,
)  # fmt: skip
MIN_PAIRS, MAX_PAIRS = 2, 50
MIN_WINDOW_S, MAX_WINDOW_S = 0.2, 60.0
WINDOW_KEYS = {"pair", "arm", "start_unix_ns", "seconds", "samples", "samples_in_plan", "cpu_seconds"}


class CompareInvalid(Exception):
    """The agent's answer does not hold together; the comparison is refused with this reason."""


def arm_of(pair: int, position: int) -> str:
    """The arm of a pair's first (position 0) or second window: pair 0 starts original, pair 1 installed."""
    return ARMS[(pair + position) % 2]


def _int(v: Any, what: str, lo: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise CompareInvalid(f"{what} is not an integer ≥ {lo}: {str(v)[:40]}")
    return v


def _num(v: Any, what: str, positive: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise CompareInvalid(f"{what} is not a {'positive' if positive else 'non-negative'} number: {str(v)[:40]}")
    return float(v)


def check(
    detail: dict[str, Any], plan_id: str, pairs: int, window_seconds: float, pid: int | None
) -> list[dict[str, Any]]:
    """The answer's windows, each checked (they pair up, arms alternate as asked, counts are non-negative,
    samples_in_plan ≤ samples, seconds > 0, ids match); raises CompareInvalid with the first fault."""
    if detail.get("id") != plan_id:
        raise CompareInvalid(f"it names the install {str(detail.get('id'))[:64]}, not the plan {plan_id}")
    if pid is not None and detail.get("pid") != pid:
        raise CompareInvalid(f"it names pid {str(detail.get('pid'))[:20]}, the plan is installed in pid {pid}")
    if detail.get("pairs") != pairs:
        raise CompareInvalid(f"it has {str(detail.get('pairs'))[:20]} pairs, {pairs} were asked for")
    ws = detail.get("window_seconds")
    if isinstance(ws, bool) or not isinstance(ws, int | float) or abs(ws - window_seconds) > 1e-6:
        raise CompareInvalid(f"its windows are of {str(ws)[:20]} s, {window_seconds:g} s were asked for")
    if detail.get("state") != "installed":
        raise CompareInvalid(f"it left the plan {str(detail.get('state'))[:32]}, not installed as it was")
    windows = detail.get("windows")
    if not isinstance(windows, list) or len(windows) != 2 * pairs:
        n = len(windows) if isinstance(windows, list) else "no list of"
        raise CompareInvalid(f"it has {n} windows, {2 * pairs} for {pairs} pairs were asked for")
    out = []
    last_start = -1
    for k, w in enumerate(windows):
        what = f"window {k}"
        if not isinstance(w, dict) or set(w) != WINDOW_KEYS:
            raise CompareInvalid(f"{what} is not {{{', '.join(sorted(WINDOW_KEYS))}}}")
        pair = _int(w["pair"], f"{what}'s pair")
        if pair != k // 2:
            raise CompareInvalid(f"{what} is of pair {pair}: the windows do not pair up in order")
        if w["arm"] != arm_of(pair, k % 2):
            raise CompareInvalid(
                f"{what} is {str(w['arm'])[:16]}, pair {pair}'s {'first' if k % 2 == 0 else 'second'} window "
                f"is {arm_of(pair, k % 2)}: the arms do not alternate"
            )
        start = _int(w["start_unix_ns"], f"{what}'s start_unix_ns")
        if start <= last_start:
            raise CompareInvalid(f"{what} starts before the window ahead of it ends")
        last_start = start
        samples = _int(w["samples"], f"{what}'s samples")
        in_plan = _int(w["samples_in_plan"], f"{what}'s samples_in_plan")
        if in_plan > samples:
            raise CompareInvalid(f"{what} has {in_plan} samples in the plan's code of {samples} samples")
        out.append(
            {
                "pair": pair,
                "arm": w["arm"],
                "start_unix_ns": start,
                "seconds": _num(w["seconds"], f"{what}'s seconds", positive=True),
                "samples": samples,
                "samples_in_plan": in_plan,
                "cpu_seconds": _num(w["cpu_seconds"], f"{what}'s cpu_seconds", positive=False),
            }
        )
    return out


def pair_shares(windows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per pair: its original and installed shares (None where the window had no samples) and whether it
    is used (both windows sampled)."""
    by_pair: dict[int, dict[str, Any]] = {}
    for w in windows:
        p = by_pair.setdefault(w["pair"], {"pair": w["pair"], "original": None, "installed": None})
        p[w["arm"]] = w["samples_in_plan"] / w["samples"] if w["samples"] else None
    rows = [by_pair[k] for k in sorted(by_pair)]
    for r in rows:
        r["used"] = r["original"] is not None and r["installed"] is not None
    return rows


def summarize(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary of checked windows (the contract's statistics)."""
    used = [p for p in pair_shares(windows) if p["used"]]
    n = len(used)
    out: dict[str, Any] = {
        "share_original": sum(p["original"] for p in used) / n if n else None,
        "share_installed": sum(p["installed"] for p in used) / n if n else None,
        "change": None,
        "interval": None,
        "confidence": CONFIDENCE,
        "verdict": "insufficient",
        "pairs_used": n,
    }
    if n < MIN_PAIRS or not out["share_original"]:
        return out
    d = [p["installed"] - p["original"] for p in used]
    mean_d = sum(d) / n
    sd = math.sqrt(sum((x - mean_d) ** 2 for x in d) / (n - 1))
    half = T975[n - 2] * sd / math.sqrt(n)
    base = out["share_original"]
    lo, hi = (mean_d - half) / base, (mean_d + half) / base
    out["change"] = mean_d / base
    out["interval"] = [lo, hi]
    out["verdict"] = "faster" if hi < 0 else "slower" if lo > 0 else "within_noise"
    return out


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def figures(summary: dict[str, Any]) -> str:
    """The change and its interval in words: "+7.1% of the samples (95% interval +2.3% .. +11.9%)"."""
    if summary.get("change") is None or summary.get("interval") is None:
        return f"no change measured ({summary.get('pairs_used', 0)} usable pairs of windows)"
    lo, hi = summary["interval"]
    conf = round(summary.get("confidence", CONFIDENCE) * 100)
    return f"{_pct(summary['change'])} of the samples ({conf}% interval {_pct(lo)} .. {_pct(hi)})"


def guard_reason(summary: dict[str, Any], action: str) -> str:
    """What the guard says on the plan's page and in the audit trail."""
    return f"guard: the plan's code took {figures(summary)}; {action}"
