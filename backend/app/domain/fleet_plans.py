# SPDX-License-Identifier: Apache-2.0
"""Installed plans across the fleet (issue 19): which hosts run which plan, since when, installed and
approved by whom, by which roll-out, and the root's measured before/after of each install.

The list is one statement over the plans and their hosts (and roll-outs); the before/after figures are no
stored summary but the uprobe-timed windows' sums (app.domain.plan_views), so they are read only for the
page's plans: calls per second and wall time per call in each window and their change, without the
per-interval spread a plan's own page shows. A plan without windows, or whose windows' measurements are no
longer stored, has no comparison and says why; nothing is estimated here. The plans' states are as stored:
a host's plans are checked for staleness when that host's plans are read (plan_records.refresh_stale), not
here, which would cost a statement per host.
"""

import json
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.domain.plan_views import emulated, window_summaries
from app.storage import nodes
from app.storage.fleet import GROUP_ID_SQL

# The figures the list carries of each window (calls per second, wall time per call): the plan's page has all.
SUMMARY = ("calls_per_s", "wall_ns_per_call")


def _filters(
    group_id: str | None, kernel_build_id: str | None, labels: dict[str, str], reverted_within_h: int
) -> tuple[str, dict[str, Any]]:
    where = ["(p.state = 'installed'"]
    params: dict[str, Any] = {}
    if reverted_within_h:
        where[0] += " OR (p.state = 'reverted' AND p.reverted_at >= now() - make_interval(hours => :rh))"
        params["rh"] = reverted_within_h
    where[0] += ")"
    if group_id:
        where.append(f"{GROUP_ID_SQL} = :g")
        params["g"] = group_id
    if kernel_build_id:
        where.append("h.kernel_build_id = :kb")
        params["kb"] = kernel_build_id
    if labels:
        where.append("h.labels @> CAST(:sel AS jsonb)")
        params["sel"] = json.dumps(labels)
    return " AND ".join(where), params


async def installed(
    db: AsyncSession,
    group_id: str | None,
    kernel_build_id: str | None,
    labels: dict[str, str],
    reverted_within_h: int,
    limit: int,
    offset: int,
) -> dict[str, Any]:
    """A page of the installed plans (and, with `reverted_within_h`, those reverted in the last hours), the
    latest install first, each with its host, workflow and before/after summary."""
    where, params = _filters(group_id, kernel_build_id, labels, reverted_within_h)
    rows = (
        await db.execute(
            text(f"""
        SELECT p.id, p.host_id, h.hostname, h.online, h.kernel_release, h.kernel_build_id AS host_kernel_build_id,
               {GROUP_ID_SQL} AS group_id, h.cpu_model, p.target_id, p.target_module, p.root_name, p.root_digest,
               p.root_function_index, p.state, p.estimated, p.code_sha256, p.installed_at, p.install_by,
               p.approved_by, p.approved_at, p.reverted_at, p.revert_by, p.rollout_id, r.state AS rollout_state,
               p.derived_from, p.window_s, p.before_measurement, p.after_measurement,
               count(*) OVER () AS n
        FROM plans p JOIN hosts h ON h.id = p.host_id LEFT JOIN rollouts r ON r.id = p.rollout_id
        WHERE {where}
        ORDER BY p.installed_at DESC NULLS LAST, p.id
        LIMIT :limit OFFSET :offset"""),
            {**params, "limit": limit, "offset": offset},
        )
    ).all()
    total = int(rows[0].n) if rows else 0
    if not rows and offset:
        total = int(
            (
                await db.execute(
                    text(f"SELECT count(*) FROM plans p JOIN hosts h ON h.id = p.host_id WHERE {where}"), params
                )
            ).scalar_one()
        )
    windows: dict[tuple[str, str], dict[str, Any]] = {}
    if rows:
        await nodes.read_across(db)  # the windows' series from each host's database node
        pairs = [(r.host_id, mid) for r in rows for mid in (r.before_measurement, r.after_measurement) if mid]
        windows = await window_summaries(db, pairs)
    items = [_item(r, windows) for r in rows]
    return {
        "total": total,
        "limit": limit,
        "offset": offset,
        "labels": labels,
        "group_id": group_id,
        "kernel_build_id": kernel_build_id,
        "reverted_within_h": reverted_within_h,
        "items": items,
    }


def _item(r: Any, windows: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    comparison, missing = _summary(r, windows)
    return {
        "plan_id": str(r.id),
        "host_id": r.host_id,
        "hostname": r.hostname,
        "online": r.online,
        "group_id": r.group_id,
        "kernel_release": r.kernel_release,
        "kernel_build_id": r.host_kernel_build_id,
        "target_id": r.target_id,
        "target_kind": "kernel" if r.target_id == "kernel" else "process",
        "target_module": r.target_module,
        "root_name": r.root_name,
        "root_digest": r.root_digest,
        "root_function_index": r.root_function_index,
        "state": r.state,
        "estimated": r.estimated,
        "code_sha256": r.code_sha256,
        "installed_at": r.installed_at,
        "installed_by": r.install_by,
        "approved_by": r.approved_by,
        "approved_at": r.approved_at,
        "reverted_at": r.reverted_at,
        "reverted_by": r.revert_by,
        "rollout_id": str(r.rollout_id) if r.rollout_id else None,
        "rollout_state": r.rollout_state,
        "derived_from": str(r.derived_from) if r.derived_from else None,
        "comparison": comparison,
        "comparison_missing": missing,
    }


def _summary(r: Any, windows: dict[tuple[str, str], dict[str, Any]]) -> tuple[dict[str, Any] | None, str | None]:
    """The root's calls per second and wall time per call before and after the install, and their change
    ((after - before) / before; null when either is missing), or None and why there is none."""
    if not r.before_measurement and not r.after_measurement:
        return None, "the install measured no window before or after"
    found: dict[str, dict[str, Any] | None] = {}
    for which, mid in (("before", r.before_measurement), ("after", r.after_measurement)):
        w = windows.get((r.host_id, mid)) if mid else None
        found[which] = (
            None
            if w is None
            else {
                "measurement_id": w["measurement_id"],
                "state": w["state"],
                "seconds": w["seconds"],
                "calls": w["calls"],
                **{k: w[k] for k in SUMMARY},
                "unavailable": w["unavailable"],
            }
        )
    if found["before"] is None and found["after"] is None:
        return None, "the windows' measurements are no longer stored"
    change: dict[str, float | None] = {}
    for key in SUMMARY:
        b, a = (found["before"] or {}).get(key), (found["after"] or {}).get(key)
        change[key] = (a - b) / b if a is not None and b else None
    return {
        "before": found["before"],
        "after": found["after"],
        "change": change,
        "emulated": emulated(r.cpu_model or ""),
    }, None
