# SPDX-License-Identifier: Apache-2.0
"""bench/catalog_store: how fast one backend process stores a kernel-sized catalog, and how fast it
answers a search and the largest page of it, each against the same work done by Postgres alone.

One backend (`python -m app` on free ports, its embedded Postgres, a data folder of its own: the tests'
`tests.backend_process.Backend`) and one scripted agent (`tests.scripted_agent.ScriptedAgent`),
enrolled like a real one, whose kernel piece holds FUNCTIONS functions of 3 blocks each
(`kernel_functions`), sent in chunks of 5000 as the backend's test of the same catalog sends them.

Storing: wall seconds from the agent's connect until the host reads `catalog_complete` (polled every
0.25 s, the figure's resolution), and the CPU seconds (user + system) spent meanwhile by the backend
process and by its Postgres (the postmaster, its children alive and those it reaped).

Reading, PAIRS pairs each, every pair taken back to back with the order alternated (so that a load
spike on a shared machine hits one side of one pair, not one side of all):
  search  GET /api/v1/hosts/H/functions?q=fn_1199&limit=100, against a bare scan of the host's
          functions with the same LIKE (SELECT count(*) ...);
  page    GET /api/v1/hosts/H/functions?limit=PAGE (min(FUNCTIONS, 100000), the API's largest), against
          Postgres building the same rows' JSON (json_agg over the same ORDER BY and LIMIT).
Each pair, then the medians and the median of the pairs' ratios (request / Postgres alone) are printed.
The answers are checked (the search's total equals the scan's count and what was sent; the page holds
PAGE rows of FUNCTIONS), so a fast wrong answer ends the run with an error. Last line, exactly:
    catalog_store: N functions stored in X s (backend CPU B s, Postgres CPU P s), search S ms
    (scan C ms, ratio R), page K rows Y ms (JSON in Postgres J ms, ratio Q)
(one line). Targets (from the backend test these bounds came out of): a search under 4 scans + 50 ms,
a page under 4 of its JSON in Postgres + 300 ms; the run says in how many pairs each was met.
"""

import asyncio
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "backend"))

import pytest  # noqa: E402
from sqlalchemy import text  # noqa: E402

from app.core.db import EmbeddedPostgres, make_engine  # noqa: E402
from app.core.postmaster import postmaster_pid, stop_postgres  # noqa: E402
from tests.backend_process import Backend  # noqa: E402
from tests.process_cpu import postgres_cpu, process_cpu  # noqa: E402
from tests.scripted_agent import KERNEL_BASE, kernel_functions  # noqa: E402

FUNCTIONS = int(os.environ.get("HOTPATH_CATALOG_STORE_FUNCTIONS", "120000"))
PAIRS = int(os.environ.get("HOTPATH_CATALOG_STORE_PAIRS", "7"))
CHUNK = 5000
PAGE = min(FUNCTIONS, 100000)  # the API's largest page
QUERY = "fn_1199"
POLL_S = 0.25
HANG_S = 600.0  # a bound for what is bound to happen (the catalog stored), not a speed check
HOST = "catalog-store"

SCAN_SQL = (
    "SELECT count(*) FROM functions f JOIN host_modules hm ON hm.digest = f.digest "
    "WHERE hm.host_id = :h AND f.name_lc LIKE '%fn\\_1199%'"
)
JSON_SQL = (
    "SELECT length(json_agg(x)::text) FROM (SELECT f.id, f.name, hm.name AS module, f.digest, f.index, "
    'hm.base_address + f."offset" AS address, to_hex(hm.base_address + f."offset") AS address_hex, '
    "f.size, f.block_count, f.undecodable FROM functions f JOIN host_modules hm ON hm.digest = f.digest "
    "WHERE hm.host_id = :h ORDER BY f.name, f.id LIMIT :limit) x"
)


def say(msg: str) -> None:
    print(f"[catalog_store {time.strftime('%H:%M:%S')}] {msg}", flush=True)


async def pairs(
    reference: Callable[[], Awaitable[Any]], request: Callable[[], Awaitable[Any]]
) -> list[tuple[float, float]]:
    """PAIRS (reference ms, request ms), each pair back to back, the order alternated pair by pair."""
    out = []
    for i in range(PAIRS):
        ms: dict[str, float] = {}
        for name in ("reference", "request") if i % 2 == 0 else ("request", "reference"):
            t0 = time.perf_counter()
            await (reference if name == "reference" else request)()
            ms[name] = (time.perf_counter() - t0) * 1000
        out.append((ms["reference"], ms["request"]))
    return out


def summary(name: str, ref_name: str, got: list[tuple[float, float]], slack_ms: float) -> tuple[float, float, float]:
    """Say each pair, the medians, the median ratio and how many pairs kept the target; return the three."""
    for i, (x, y) in enumerate(got, 1):
        say(f"{name} pair {i}: {y:.0f} ms ({ref_name} {x:.0f} ms, ratio {y / x:.1f})")
    ref = statistics.median(x for x, _ in got)
    req = statistics.median(y for _, y in got)
    ratio = statistics.median(y / x for x, y in got)
    kept = sum(y < 4 * x + slack_ms for x, y in got)
    say(
        f"{name}: median {req:.0f} ms, {ref_name} {ref:.0f} ms, median ratio {ratio:.1f}; target "
        f"(under 4 x {ref_name} + {slack_ms:.0f} ms) met in {kept} of {len(got)} pairs"
    )
    return req, ref, ratio


async def run(data: Path, backend: Backend, pgs: list[EmbeddedPostgres]) -> str:
    await backend.start()
    pgdata = data / "pgdata"
    say(f"backend pid {backend.proc.pid if backend.proc else '?'} on {backend.url}, data folder {data}")
    fns = kernel_functions(FUNCTIONS)
    blocks = sum(len(f.blocks) for f in fns)
    expected = sum(QUERY in f.name.lower() for f in fns)
    agent = await backend.agent(
        HOST, kernel_tag=f"catalog-store-{FUNCTIONS}", modules=[("vmlinux", KERNEL_BASE, fns)], chunk_size=CHUNK
    )
    # The backend's own Postgres, attached to (no watchdog of this process: the backend stops it), for the
    # reference queries.
    pg = EmbeddedPostgres(pgdata, watchdog=False)
    pgs.append(pg)
    engine = make_engine(pg.start())
    api = await backend.admin()
    try:
        pid = backend.proc.pid if backend.proc else 0

        async def complete() -> bool:
            r = await api.get(f"/api/v1/hosts/{HOST}")
            return r.status_code == 200 and bool(r.json()["catalog_complete"])

        c_backend, c_pg, t0 = process_cpu(pid), postgres_cpu(pgdata), time.perf_counter()
        await agent.connect()
        while not await complete():
            if time.perf_counter() - t0 > HANG_S:
                raise SystemExit(f"the catalog was not stored within {HANG_S:.0f} s")
            await asyncio.sleep(POLL_S)
        stored_s = time.perf_counter() - t0
        cpu_backend, cpu_pg = process_cpu(pid) - c_backend, postgres_cpu(pgdata) - c_pg
        say(
            f"stored {FUNCTIONS} functions, {blocks} blocks (chunks of {CHUNK}) in {stored_s:.1f} s: "
            f"backend CPU {cpu_backend:.1f} s, Postgres CPU {cpu_pg:.1f} s"
        )
        await agent.close()

        async def scalar(sql: str, **params: Any) -> Any:
            async with engine.connect() as conn:
                return (await conn.execute(text(sql), params)).scalar_one()

        async def scan() -> None:
            n = await scalar(SCAN_SQL, h=HOST)
            if n != expected:
                raise SystemExit(f"the scan counted {n} functions matching {QUERY!r}, {expected} were sent")

        async def search() -> None:
            r = await api.get(f"/api/v1/hosts/{HOST}/functions", params={"q": QUERY, "limit": 100})
            if r.status_code != 200 or r.json()["total"] != expected:
                raise SystemExit(f"the search answered {r.status_code}: {r.text[:300]} ({expected} expected)")

        async def json_in_postgres() -> None:
            await scalar(JSON_SQL, h=HOST, limit=PAGE)

        async def page() -> None:
            r = await api.get(f"/api/v1/hosts/{HOST}/functions", params={"limit": PAGE})
            body = r.json() if r.status_code == 200 else {}
            if len(body.get("items", [])) != PAGE or body.get("total") != FUNCTIONS:
                raise SystemExit(f"the page answered {r.status_code}: {r.text[:300]} ({PAGE} of {FUNCTIONS} expected)")

        for warm in (scan, search, json_in_postgres, page):  # checked once and warmed before the pairs
            await warm()
        searches = await pairs(scan, search)
        s_req, s_ref, s_ratio = summary("search", "scan", searches, 50)
        pages = await pairs(json_in_postgres, page)
        p_req, p_ref, p_ratio = summary(f"page of {PAGE} rows", "JSON in Postgres", pages, 300)
        return (
            f"catalog_store: {FUNCTIONS} functions stored in {stored_s:.1f} s (backend CPU {cpu_backend:.1f} s, "
            f"Postgres CPU {cpu_pg:.1f} s), search {s_req:.0f} ms (scan {s_ref:.0f} ms, ratio {s_ratio:.1f}), "
            f"page {PAGE} rows {p_req:.0f} ms (JSON in Postgres {p_ref:.0f} ms, ratio {p_ratio:.1f})"
        )
    finally:
        await api.aclose()
        await engine.dispose()


async def stop(data: Path, backend: Backend, pgs: list[EmbeddedPostgres]) -> None:
    """Never leave the backend or its Postgres running: the backend first (a clean stop stops its
    Postgres; it would restart one stopped under it), then whatever Postgres is left."""
    proc = backend.proc
    if proc is not None and proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    if postmaster_pid(data / "pgdata") is not None:
        if pgs:
            pgs[0].stop()
        else:
            stop_postgres(data / "pgdata", None)


async def main() -> None:
    data = Path(tempfile.mkdtemp(prefix="hotpath-catalog-store-"))
    backend = Backend(data)
    pgs: list[EmbeddedPostgres] = []
    ok = False
    try:
        line = await run(data, backend, pgs)
        ok = True
    except pytest.fail.Exception as e:  # Backend reports a failed start as a test failure
        raise SystemExit(f"the backend did not start: {e}") from None
    finally:
        await stop(data, backend, pgs)
        if ok:
            shutil.rmtree(data, ignore_errors=True)
        else:
            say(f"kept {data} (backend.log)")
    print(line, flush=True)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup: stop the backend
    asyncio.run(main())
