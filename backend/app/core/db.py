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
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from app.core.config import normalise_database_url
from app.core.postmaster import postmaster_pid, stop_postgres, wait_for_settled_postmaster

log = logging.getLogger("hotpath.db")
BACKEND_DIR = Path(__file__).resolve().parents[2]


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
