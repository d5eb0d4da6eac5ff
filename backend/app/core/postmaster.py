# SPDX-License-Identifier: Apache-2.0
"""The embedded Postgres's postmaster as a process: whether one runs in a data folder, its status, and
stopping it (`pg_ctl stop -m fast`, then signals).

Apart from app.core.db so that the watchdog process (app.core.pg_watchdog), started beside every
embedded Postgres, imports only the standard library: through app.core.db it imported SQLAlchemy,
Alembic and the settings, 1.9 s of CPU for a process that polls its parent (session 21).
"""

import logging
import os
import signal
import subprocess
import time
from pathlib import Path

log = logging.getLogger("hotpath.db")


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid in pgdata/postmaster.pid if that process is alive (and not a zombie)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return None
        return pid
    except (OSError, ValueError, IndexError):
        return None


def postmaster_status(pgdata: Path) -> str | None:
    """The status line of pgdata/postmaster.pid (ready, starting, stopping, standby) if its postmaster is
    alive; None when no postmaster runs there."""
    if postmaster_pid(pgdata) is None:
        return None
    try:
        lines = (pgdata / "postmaster.pid").read_text().split("\n")
        return lines[7].strip() if len(lines) > 7 else "starting"
    except OSError:
        return None


def wait_for_settled_postmaster(pgdata: Path, timeout: float = 60.0) -> None:
    """Wait while a Postgres in pgdata is starting or stopping (e.g. the watchdog of a killed backend
    stopping it as a new backend starts), until it is ready or gone; a RuntimeError after `timeout`."""
    deadline = time.monotonic() + timeout
    said = False
    while (status := postmaster_status(pgdata)) in ("starting", "stopping"):
        if not said:
            log.info("the Postgres in %s is %s: waiting until it is ready or stopped", pgdata, status)
            said = True
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the Postgres in {pgdata} has been {status} for {timeout:.0f} s (postmaster "
                f"{postmaster_pid(pgdata)}); stop it (pg_ctl -D {pgdata} stop), then start Hotpath again"
            )
        time.sleep(0.2)


def stop_postgres(pgdata: Path, system_user: str | None) -> None:
    """Stop the Postgres of pgdata: a fast shutdown, then signals if it does not go."""
    pid = postmaster_pid(pgdata)
    if pid is None:
        return
    from pgserver._commands import POSTGRES_BIN_PATH

    try:
        subprocess.run(
            [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-w", "-t", "20", "-m", "fast", "stop"],
            user=system_user,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )
    except (subprocess.SubprocessError, OSError):
        log.warning("pg_ctl stop failed; signalling the postmaster %d", pid)
        for sig in (signal.SIGTERM, signal.SIGQUIT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                return
            for _ in range(50):
                if postmaster_pid(pgdata) is None:
                    return
                time.sleep(0.1)
