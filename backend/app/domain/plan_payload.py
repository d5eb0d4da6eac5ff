# SPDX-License-Identifier: Apache-2.0
"""What an install carries to the agent: of the stored plan, only what the agent's installer reads
(hp_iplan_parse in agent/src/replace/plan_file.c) — the target's identity, the code with its relocations
and unwind data, and each member's addresses, original digest, block layout, jump labels and static
calls. The listing, the I-cache heatmaps, the profile, the chain tables and the totals stay in the
backend: they are most of a large plan (docs/decisions.md has the sizes) and the agent takes at most
16 MiB. The agent recomputes the code's hash from the bytes carried and refuses
anything but the approved one, so leaving fields out can make an install refused, never a different
one installed."""

from typing import Any

PLAN_KEYS = ("status", "message", "root", "target")
CODE_KEYS = ("verified", "base", "bytes", "hex", "sha256", "unwind", "relocations")
MEMBER_KEYS = (
    "function",
    "module",
    "original_sha256",
    "address",
    "new_address",
    "size",
    "jump_labels",
    "static_calls",
)
BLOCK_KEYS = ("offset", "size", "new_address", "new_size")


def _pick(d: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: d[k] for k in keys if isinstance(d, dict) and k in d}


def install_payload(plan: dict[str, Any]) -> dict[str, Any]:
    """The stored plan cut to what the agent's installer reads."""
    out = _pick(plan, PLAN_KEYS)
    options = plan.get("options")
    if isinstance(options, dict) and "hot_set" in options:
        out["options"] = {"hot_set": options["hot_set"]}
    out["code"] = _pick(plan.get("code"), CODE_KEYS)
    out["group"] = [
        {
            **_pick(m, MEMBER_KEYS),
            "layout": [_pick(b, BLOCK_KEYS) for b in (m.get("layout") or ()) if isinstance(b, dict)],
        }
        for m in (plan.get("group") or ())
        if isinstance(m, dict)
    ]
    return out
