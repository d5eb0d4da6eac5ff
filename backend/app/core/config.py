# SPDX-License-Identifier: Apache-2.0
"""Settings of the backend, read from the environment (HOTPATH_* and DATABASE_URL).

Everything has a default that suits one host running `make run`; deployments override through the
environment only, so the same image serves docker-compose, systemd and tests.
"""

import ipaddress
from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HOTPATH_", extra="ignore")

    data_dir: Path = Path("var")
    http_host: str = "0.0.0.0"
    http_port: int = 8080
    grpc_host: str = "0.0.0.0"
    grpc_port: int = 50051
    static_dir: Path | None = None
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("DATABASE_URL", "HOTPATH_DATABASE_URL")
    )
    # Several database nodes (docs/deployment.md, "Several database nodes"): the DSNs of the nodes the series
    # are spread over by host, besides DATABASE_URL's database (the coordinator), comma-separated URLs.
    # Empty: one database, nothing spread. Needs DATABASE_URL and a Postgres with postgres_fdw.
    db_nodes: str = ""
    sample_retention_hours: float = 24.0
    # Call stacks are kept as long as the samples unless set shorter (HOTPATH_STACK_RETENTION_HOURS): a
    # host running many short-lived or JIT-compiled programs defines hundreds of new stacks a second.
    stack_retention_hours: float | None = None
    retention_interval_s: float = 300.0
    access_token_minutes: int = 12 * 60
    command_timeout_s: float = 15.0  # how long a request waits for a quick command (inspect)
    # A command for a host whose agent stays away this long fails; the sweep also resends lost notifications.
    command_queue_timeout_s: float = 300.0
    command_sweep_interval_s: float = 2.0
    # Rollups: advanced every interval over buckets that ended at least lag seconds ago; kept (by
    # dropping their daily partitions) for rollup_retention_hours, default the sample retention.
    rollup_interval_s: float = 5.0
    rollup_lag_s: float = 10.0
    rollup_retention_hours: float | None = None
    # The most resources one measurement request may name (a function's blocks count as its rows
    # on the agent, which serves at most 65536 rows).
    max_measurement_resources: int = 10000
    # A plan's JSON (PlanResult.plan_json from an agent, InstallPlan.plan_json to it): at most the 16 MiB
    # the agent accepts. The gRPC message limit follows from it (grpc_max_message_bytes), so a plan of
    # this size always fits in a message both ways.
    max_plan_bytes: int = Field(default=16 * 1024 * 1024, ge=64 * 1024, le=16 * 1024 * 1024)
    plan_install_timeout_s: float = 120.0  # how long an install flow waits for the agent's answer
    # Plans left installing by a flow that no longer runs (a backend stopped during it) are settled from
    # the agent's ListInstalled at start-up and every interval, once older than their window plus grace.
    plan_reconcile_interval_s: float = 30.0
    plan_reconcile_grace_s: float = 60.0
    # Agents: enrolment (server-authenticated TLS) on its own port, 0 = the agent port + 1.
    enroll_port: int = 0
    tls_server_names: str = ""  # extra names/IPs for the server certificate, comma-separated
    enrolment_token_hours: float = 24.0
    max_pending_enrolments: int = 1000
    enrolment_requests_per_minute: int = 20  # new tokenless requests per peer address and minute
    enrolment_request_ttl_s: float = 24 * 3600.0  # an undecided (or decided, unused) request is then forgotten
    # Per-stream limits: data messages per second (the message size follows max_plan_bytes, below).
    agent_messages_per_s: float = 200.0
    agent_streams_per_peer: int = 64
    hello_timeout_s: float = 30.0
    # A data batch must lie within [now - sample retention, now + max clock skew] of our clock.
    max_clock_skew_s: float = 120.0
    replica_id: str = ""  # which backend replica holds a stream; default host name and agent port
    # HTTP: HTTPS with the installation CA's server certificate (or the files given), limits.
    https: bool = False
    https_cert_file: Path | None = None
    https_key_file: Path | None = None
    max_body_bytes: int = 1024 * 1024
    login_failures_before_lockout: int = 5
    login_lockout_s: float = 300.0
    login_attempts_per_minute: int = 30
    # Reverse proxies in front of the HTTP API (addresses or networks, comma-separated, e.g.
    # "10.0.0.5,192.168.1.0/24"): only a request from one of them has its X-Forwarded-For (the client
    # address the sign-in limit and the audit log use) and X-Forwarded-Proto honoured. Empty: none.
    trusted_proxies: str = ""
    audit_retention_days: float = 90.0
    ws_ping_interval_s: float = 20.0
    log_level: str = "INFO"
    # When set, GET /metrics needs "Authorization: Bearer <this token>"; unset, it is open (it carries
    # aggregate counters only: no host ids, function names or users).
    metrics_token: str | None = None

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_addresses(cls, value: str) -> str:
        for item in (p.strip() for p in value.split(",")):
            if item:
                try:
                    ipaddress.ip_network(item, strict=False)
                except ValueError:
                    raise ValueError(f"HOTPATH_TRUSTED_PROXIES: {item!r} is not an IP address or network") from None
        return value

    @property
    def trusted_proxy_list(self) -> list[str]:
        return [p.strip() for p in self.trusted_proxies.split(",") if p.strip()]

    @property
    def grpc_max_message_bytes(self) -> int:
        """The largest agent stream message, each way: a plan of max_plan_bytes with 1 MiB for the rest of
        its message (ids, hash, and in InstallPlan the approved hash), never below 8 MiB (a catalog chunk
        is at most 2 MiB, a metric batch far less)."""
        return max(8 * 1024 * 1024, self.max_plan_bytes + 1024 * 1024)


@lru_cache
def get_settings() -> Settings:
    return Settings()


def normalise_database_url(url: str) -> str:
    """Make SQLAlchemy use psycopg 3 whatever scheme the URL was given with."""
    for prefix in ("postgresql+psycopg://", "postgresql+psycopg2://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    raise ValueError(f"unsupported database URL scheme: {url.split(':', 1)[0]} (expected postgresql://)")
