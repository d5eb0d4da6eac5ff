# SPDX-License-Identifier: Apache-2.0
"""Alembic environment: runs migrations online against the URL the backend (or DATABASE_URL) gives."""

import os

from alembic import context
from sqlalchemy import create_engine, pool, text

from app.core.config import normalise_database_url
from app.storage.models import Base

config = context.config
target_metadata = Base.metadata
# Replicas on one database may start at once: the first to take this lock migrates, the others wait
# and then find the database at head (the lock is the migrating transaction's).
MIGRATION_LOCK = 0x68706D67  # "hpmg"


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("DATABASE_URL")
    if not url:
        raise RuntimeError("no database URL: set DATABASE_URL")
    return normalise_database_url(url)


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
