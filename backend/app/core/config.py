# SPDX-License-Identifier: Apache-2.0
"""Settings of the backend, read from the environment (HOTPATH_* and DATABASE_URL).

Everything has a default that suits one host running `make run`; deployments override through the
environment only, so the same image serves docker-compose, systemd and tests.
"""
from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HOTPATH_", extra="ignore")

    data_dir: Path = Path("var")
    http_host: str = "0.0.0.0"
    http_port: int = 8080
    grpc_host: str = "0.0.0.0"
    grpc_port: int = 50051
    static_dir: Path | None = None
    database_url: str | None = Field(default=None, validation_alias=AliasChoices("DATABASE_URL", "HOTPATH_DATABASE_URL"))
    sample_retention_hours: float = 24.0
    retention_interval_s: float = 300.0
    access_token_minutes: int = 12 * 60
    command_timeout_s: float = 15.0
    grpc_max_message_bytes: int = 64 * 1024 * 1024
    ws_ping_interval_s: float = 20.0
    log_level: str = "INFO"
    # When set, GET /metrics needs "Authorization: Bearer <this token>"; unset, it is open (it carries
    # aggregate counters only: no host ids, function names or users).
    metrics_token: str | None = None


@lru_cache
def get_settings() -> Settings:
    return Settings()


def normalise_database_url(url: str) -> str:
    """Make SQLAlchemy use psycopg 3 whatever scheme the URL was given with."""
    for prefix in ("postgresql+psycopg://", "postgresql+psycopg2://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    raise ValueError(f"unsupported database URL scheme: {url.split(':', 1)[0]} (expected postgresql://)")
