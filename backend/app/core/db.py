# SPDX-License-Identifier: Apache-2.0
"""Database plumbing: the embedded Postgres (pgserver) when no DATABASE_URL is given, the async
SQLAlchemy engine and session factory, and running the Alembic migrations.

The embedded server lives in $HOTPATH_DATA_DIR/pgdata and is reached over a Unix socket only. The
backend supervises it itself (pgserver only installs, initialises and starts it): it restarts a
Postgres that died, stops it on shutdown with `pg_ctl stop -m fast`, and leaves a small watchdog
process (app.core.pg_watchdog) that stops it if the backend is killed. A DATABASE_URL server is never
touched.
"""

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from app.core.config import normalise_database_url

log = logging.getLogger("hotpath.db")
BACKEND_DIR = Path(__file__).resolve().parents[2]


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


class EmbeddedPostgres:
    """The backend's own Postgres in a data folder: started, restarted when it dies, stopped with the
    backend (and by a watchdog process if the backend is killed)."""

    def __init__(self, pgdata: Path, watchdog: bool = True) -> None:
        self.pgdata = pgdata.resolve() if pgdata.exists() else pgdata
        self.watchdog = watchdog
        self._server: Any = None  # pgserver.PostgresServer, imported lazily
        self._watchdog: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> str:
        """Start (or attach to, or restart) the server; returns its URL."""
        import pgserver  # imported here: deployments with DATABASE_URL never need its binaries

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        if self._server is None:
            # A Postgres left stopping (a killed backend's watchdog) or starting: attach only once it
            # is ready or gone (pgserver asserts 'ready' of a running one).
            wait_for_settled_postmaster(self.pgdata)
            self._server = pgserver.get_server(self.pgdata, cleanup_mode=None)
            self.pgdata = self._server.pgdata
        else:
            for attempt in range(30):  # a killed postmaster's children may hold its memory a moment
                try:
                    with self._server._lock:
                        self._server.ensure_postgres_running()
                    break
                except Exception:  # noqa: BLE001 - try again; the caller logs a final failure
                    if attempt == 29:
                        raise
                    time.sleep(1)
        self.url = normalise_database_url(self._server.get_uri())
        if self.watchdog and (self._watchdog is None or self._watchdog.poll() is not None):
            self._watchdog = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "app.core.pg_watchdog",
                    str(os.getpid()),
                    str(self.pgdata),
                    self._server.system_user or "",
                ],
                cwd=BACKEND_DIR,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        return self.url

    def running(self) -> bool:
        return postmaster_pid(self.pgdata) is not None

    def stop(self) -> None:
        if self._watchdog is not None and self._watchdog.poll() is None:
            self._watchdog.terminate()
            self._watchdog.wait(5)
        try:
            stop_postgres(self.pgdata, self._server.system_user if self._server else None)
        except Exception:  # noqa: BLE001 - shutdown must go on
            log.exception("stopping the embedded Postgres failed")


def start_embedded_postgres(pgdata: Path) -> tuple[EmbeddedPostgres, str]:
    """Start (or attach to) the embedded Postgres in `pgdata`; returns (handle, URL)."""
    server = EmbeddedPostgres(pgdata)
    return server, server.start()


def stop_embedded_postgres(server: EmbeddedPostgres) -> None:
    server.stop()


def describe_error(exc: BaseException) -> str:
    """A database error for a log line: the driver's error type, its SQLSTATE and the first line of its
    message (SQLSTATE 53100: the disk is full)."""
    orig = getattr(exc, "orig", None) or exc
    state = getattr(orig, "sqlstate", None)
    first = (str(orig).strip().splitlines() or [""])[0][:200]
    return f"{type(orig).__name__}" + (f", SQLSTATE {state}" if state else "") + (f": {first}" if first else "")


def make_engine(url: str) -> AsyncEngine:
    return create_async_engine(normalise_database_url(url), pool_size=10, max_overflow=10, pool_pre_ping=True)


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def alembic_config(url: str) -> Config:
    cfg = Config(str(BACKEND_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(BACKEND_DIR / "app" / "alembic"))
    # ConfigParser interpolation treats % specially; URLs may contain %-escapes.
    cfg.set_main_option("sqlalchemy.url", normalise_database_url(url).replace("%", "%%"))
    return cfg


def upgrade_database(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade_database(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)
