# SPDX-License-Identifier: Apache-2.0
"""CPU seconds of a process and of a Postgres server, for the benchmarks that print what storing cost
(bench/ingest, bench/catalog_store): one way of counting, so their figures can be compared."""

from pathlib import Path

import psutil

from app.core.postmaster import postmaster_pid


def process_cpu(pid: int) -> float:
    """User and system CPU seconds of one process so far (its threads included, its children not)."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def postgres_cpu(pgdata: Path) -> float:
    """CPU seconds of the Postgres of pgdata so far: the postmaster, the children it has reaped (counted
    in its children_user/system: connections that ended, autovacuum workers) and those alive (each
    connection is a child process). A difference of two readings is what the server spent between them,
    connections opened and closed meanwhile included."""
    pid = postmaster_pid(pgdata)
    if pid is None:
        raise SystemExit(f"no Postgres runs in {pgdata}")
    postmaster = psutil.Process(pid)
    t = postmaster.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in postmaster.children():
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.NoSuchProcess:
            pass  # ended between the two calls: reaped, its time counted in the next reading
    return total
