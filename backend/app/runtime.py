# SPDX-License-Identifier: Apache-2.0
"""The live objects one backend process shares between its HTTP and gRPC sides: settings, database
session factory, signing key, the certificate authority, this replica's id, the WebSocket hub, the
registry of connected agents, the commands service, the ingest writer, the replicas' bus and the
backend's own metrics.
Routes reach it through `request.app.state.runtime`; tests build their own."""
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.core.config import Settings
from app.live import LiveHub
from app.metrics import Metrics

if TYPE_CHECKING:
    from app.bus import Bus
    from app.commands import Commands
    from app.core.pki import Pki
    from app.grpc.agent_service import AgentRegistry
    from app.plans import Plans
    from app.series.writer import IngestWriter


@dataclass
class Runtime:
    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    secret_key: bytes
    pki: "Pki"
    replica_id: str
    enroll_port: int = 0  # where agents enrol, once the gRPC server listens
    hub: LiveHub = field(default_factory=LiveHub)
    metrics: Metrics = field(default_factory=Metrics)
    agents: "AgentRegistry" = None  # type: ignore[assignment]  # set by app.server.build_runtime
    commands: "Commands" = None  # type: ignore[assignment]  # set by app.server.build_runtime
    plans: "Plans" = None  # type: ignore[assignment]  # set by app.server.build_runtime
    writer: "IngestWriter" = None  # type: ignore[assignment]  # set by app.server.build_runtime
    bus: "Bus | None" = None  # started with the servers
    database_url: str = ""
    background: list = field(default_factory=list)  # the servers' background tasks
