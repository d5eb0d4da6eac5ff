# SPDX-License-Identifier: Apache-2.0
"""The fleet: hosts grouped by kernel build (release and build id), narrowed by label, and a group's hot
code over a time range. Hosts of one build share their catalog pieces (content-addressed), so a function
has the same id on every host of the group and the rollups of all of them add up per function id.

Hot code reads only the rollups (`sample_blocks_1h`/`_1m` and `sample_totals_1h`/`_1m`) over the whole
hours and minutes of the range below the rollup watermarks (app.storage.samples.plan): never the raw
intervals, so a request costs what the rollup rows of the group's hosts in the range cost, not what
their raw rows would. The edges of the range that no rollup covers yet are left out, and the answer
says which part of the range it covers (docs/decisions.md, "Fleet hot code from the rollups").
"""

import json
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.storage.samples import TimeRange, plan
from app.storage.series import rollups

# The hosts the fleet shows: active, and connected at least once (so their kernel is known).
ACTIVE = "h.status = 'active' AND h.connected_at IS NOT NULL"
# A group's id: a digest of its kernel release and build id (stable, URL-safe, no separator to escape).
GROUP_ID_SQL = "md5(h.kernel_release || chr(10) || h.kernel_build_id)"

_GROUP_SORTS = {
    "hosts": "host_count {dir}, kernel_release, kernel_build_id",
    "release": "kernel_release {dir}, kernel_build_id {dir}",
    "online": "online_count {dir}, host_count DESC, kernel_release",
    "offline": "host_count - online_count {dir}, host_count DESC, kernel_release",
}


def _label_filter(labels: dict[str, str]) -> tuple[str, dict[str, Any]]:
    if not labels:
        return "", {}
    return " AND h.labels @> CAST(:sel AS jsonb)", {"sel": json.dumps(labels)}


async def groups(
    session: AsyncSession, labels: dict[str, str], limit: int, offset: int, sort: str, descending: bool
) -> dict[str, Any]:
    """A page of kernel-build groups of the active hosts (that have connected at least once, so their kernel
    is known) carrying every label in `labels`, each with its
    host count, online and offline counts and its hosts (id, name, online, labels)."""
    where, params = _label_filter(labels)
    order = _GROUP_SORTS[sort].format(dir="DESC" if descending else "ASC")
    rows = (
        await session.execute(
            text(f"""
        WITH g AS (
            SELECT {GROUP_ID_SQL} AS id, h.kernel_release, h.kernel_build_id, count(*) AS host_count,
                   count(*) FILTER (WHERE h.online) AS online_count,
                   json_agg(json_build_object('id', h.id, 'hostname', h.hostname, 'online', h.online,
                                              'last_seen', h.last_seen, 'labels', h.labels)
                            ORDER BY h.hostname, h.id) AS hosts
            FROM hosts h WHERE {ACTIVE}{where}
            GROUP BY 1, 2, 3)
        SELECT g.*, count(*) OVER () AS n, sum(host_count) OVER () AS all_hosts FROM g
        ORDER BY {order} LIMIT :limit OFFSET :offset"""),
            {**params, "limit": limit, "offset": offset},
        )
    ).all()
    total = int(rows[0].n) if rows else 0
    if not rows and offset:
        total = int(
            (
                await session.execute(
                    text(f"SELECT count(DISTINCT {GROUP_ID_SQL}) FROM hosts h WHERE {ACTIVE}{where}"),
                    params,
                )
            ).scalar_one()
        )
    return {
        "total": total,
        "limit": limit,
        "offset": offset,
        "labels": labels,
        "items": [
            {
                "id": r.id,
                "kernel_release": r.kernel_release,
                "kernel_build_id": r.kernel_build_id,
                "host_count": int(r.host_count),
                "online_count": int(r.online_count),
                "offline_count": int(r.host_count - r.online_count),
                "hosts": r.hosts,
            }
            for r in rows
        ],
    }


async def group_summary(session: AsyncSession, group_id: str) -> dict[str, Any] | None:
    row = (
        await session.execute(
            text(f"""
        SELECT h.kernel_release, h.kernel_build_id FROM hosts h
        WHERE {ACTIVE} AND {GROUP_ID_SQL} = :g LIMIT 1"""),
            {"g": group_id},
        )
    ).first()
    if row is None:
        return None
    return {"id": group_id, "kernel_release": row.kernel_release, "kernel_build_id": row.kernel_build_id}


def _rollup_spans(spans: list[tuple[str, datetime, datetime]]) -> list[tuple[str, datetime, datetime]]:
    return [s for s in spans if s[0] != "raw"]


def _union(
    table: str, cols: str, spans: list[tuple[str, datetime, datetime]], prefix: str
) -> tuple[str, dict[str, Any]]:
    parts: list[str] = []
    params: dict[str, Any] = {}
    for i, (grain, lo, hi) in enumerate(spans):
        a, b = f"{prefix}lo{i}", f"{prefix}hi{i}"
        params[a], params[b] = lo, hi
        parts.append(
            f"SELECT {cols} FROM {table}_{grain} WHERE host_id IN (SELECT id FROM grp) "
            f"AND bucket >= :{a} AND bucket < :{b}"
        )
    return " UNION ALL ".join(parts), params


_HOT_SORTS = {
    "samples": "r.s {dir}, f.name, r.function_id",
    "hosts": "r.hot_hosts {dir}, r.s DESC, f.name, r.function_id",
    "name": "f.name {dir}, r.function_id",
}


async def hot_code(
    session: AsyncSession,
    group: dict[str, Any],
    labels: dict[str, str],
    r: TimeRange,
    min_share: float,
    limit: int,
    offset: int,
    sort: str,
    descending: bool,
) -> dict[str, Any]:
    """The group's hottest functions in the range (samples of the idle task left out), each with its
    samples on every host of the group that has any and the share of the group's hosts where it is hot:
    where its samples are at least `min_share` of that host's busy (non-idle) samples in the range."""
    wm_1m, wm_1h = await rollups.watermarks(await session.connection())
    spans = _rollup_spans(plan(r.start, r.end, wm_1m, wm_1h))
    where, params = _label_filter(labels)
    grp = f"SELECT h.id FROM hosts h WHERE {ACTIVE} AND {GROUP_ID_SQL} = :g{where}"
    params = {**params, "g": group["id"]}
    hosts_sql = f"""SELECT h.id, h.hostname, h.online, h.labels FROM hosts h
        WHERE {ACTIVE} AND {GROUP_ID_SQL} = :g{where} ORDER BY h.hostname, h.id"""
    host_rows = (await session.execute(text(hosts_sql), params)).all()
    covered = (min(s[1] for s in spans), max(s[2] for s in spans)) if spans else None
    busy: dict[str, int] = {}
    items: list[dict[str, Any]] = []
    n = 0
    if spans and host_rows:
        blocks, bp = _union("sample_blocks", "host_id, function_id, count - idle_count AS c", spans, "b")
        totals, tp = _union("sample_totals", "host_id, total_samples - idle_samples AS c", spans, "t")
        order = _HOT_SORTS[sort].format(dir="DESC" if descending else "ASC")
        all_params = {**params, **bp, **tp, "min_share": min_share, "limit": limit, "offset": offset}
        for row in await session.execute(
            text(f"""
            WITH grp AS ({grp})
            SELECT host_id, sum(c) AS busy FROM ({totals}) t GROUP BY host_id"""),
            all_params,
        ):
            busy[row.host_id] = int(row.busy)
        rows = (
            await session.execute(
                text(f"""
            WITH grp AS ({grp}),
            per_host AS (SELECT host_id, function_id, sum(c) AS s FROM ({blocks}) b GROUP BY 1, 2 HAVING sum(c) > 0),
            busy AS (SELECT host_id, sum(c) AS busy FROM ({totals}) t GROUP BY host_id),
            ranked AS (
                SELECT p.function_id, sum(p.s) AS s,
                       count(*) FILTER (WHERE bz.busy > 0 AND p.s >= :min_share * bz.busy) AS hot_hosts
                FROM per_host p LEFT JOIN busy bz USING (host_id) GROUP BY p.function_id),
            page AS (
                SELECT r.function_id, r.s, r.hot_hosts, f.name, coalesce(cp.module, '') AS module,
                       count(*) OVER () AS n
                FROM ranked r JOIN functions f ON f.id = r.function_id
                LEFT JOIN catalog_pieces cp ON cp.digest = f.digest
                ORDER BY {order} LIMIT :limit OFFSET :offset)
            SELECT page.*,
                   (SELECT json_agg(json_build_array(p.host_id, p.s) ORDER BY p.s DESC, p.host_id)
                    FROM per_host p WHERE p.function_id = page.function_id) AS cells
            FROM page
            ORDER BY {order.replace("r.", "page.").replace("f.name", "page.name")}"""),
                all_params,
            )
        ).all()
        n = int(rows[0].n) if rows else 0
        for row in rows:
            cells = []
            for host_id, s in row.cells or []:
                b = busy.get(host_id, 0)
                share = int(s) / b if b else 0.0
                cells.append(
                    {"host_id": host_id, "samples": int(s), "share": share, "hot": bool(b) and share >= min_share}
                )
            items.append(
                {
                    "function_id": row.function_id,
                    "name": row.name,
                    "module": row.module,
                    "samples": int(row.s),
                    "hot_hosts": int(row.hot_hosts),
                    "host_share": int(row.hot_hosts) / len(host_rows),
                    "cells": cells,
                }
            )
    return {
        **r.public(),
        "covered_from": covered[0] if covered else None,
        "covered_to": covered[1] if covered else None,
        "rollups": [{"grain": g, "from": lo, "to": hi} for g, lo, hi in spans],
        "group": group,
        "labels": labels,
        "min_share": min_share,
        "hosts": [
            {
                "id": h.id,
                "hostname": h.hostname,
                "online": h.online,
                "labels": h.labels,
                "busy_samples": busy.get(h.id, 0),
            }
            for h in host_rows
        ],
        "functions": n,
        "limit": limit,
        "offset": offset,
        "items": items,
    }
