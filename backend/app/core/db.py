# SPDX-License-Identifier: Apache-2.0
"""Database plumbing: the embedded Postgres (pgserver) when no DATABASE_URL is given, the async
SQLAlchemy engine and session factory, and running the Alembic migrations.

The embedded server lives in $HOTPATH_DATA_DIR/pgdata and is reached over a Unix socket only. pgserver
stops it when the last process holding a handle calls cleanup (or exits), so the backend calls
`stop_embedded_postgres` on shutdown; a DATABASE_URL server is never touched.
"""
import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from app.core.config import normalise_database_url

log = logging.getLogger("hotpath.db")
BACKEND_DIR = Path(__file__).resolve().parents[2]


def start_embedded_postgres(pgdata: Path):
    """Start (or attach to) the embedded Postgres in `pgdata`; returns (server handle, URL)."""
    import pgserver  # imported here: deployments with DATABASE_URL never need its binaries

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    return server, normalise_database_url(server.get_uri())


def stop_embedded_postgres(server) -> None:
    try:
        server.cleanup()
    except Exception:  # noqa: BLE001 - shutdown must go on; pgserver's atexit hook retries
        log.exception("stopping the embedded Postgres failed")


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
