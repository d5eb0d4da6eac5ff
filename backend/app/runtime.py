# SPDX-License-Identifier: Apache-2.0
"""The live objects one backend process shares between its HTTP and gRPC sides: settings, database
session factory, signing key, the certificate authority, this replica's id, the WebSocket hub, the
registry of connected agents, the commands service, the ingest writer, the replicas' bus and the
backend's own metrics.
Routes reach it through `request.app.state.runtime`; tests build their own."""

import asyncio
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.core.bus import Bus
from app.core.config import Settings
from app.core.live import LiveHub
from app.core.metrics import Metrics
from app.core.pki import Pki
from app.domain.commands import Commands
from app.domain.plans import Plans
from app.domain.rollouts import Rollouts
from app.domain.sessions import AgentRegistry
from app.storage.ingest import IngestWriter
from app.storage.nodes import Nodes


@dataclass
class Runtime:
    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    secret_key: bytes
    pki: Pki
    replica_id: str
    hub: LiveHub
    metrics: Metrics
    agents: AgentRegistry
    commands: Commands
    plans: Plans
    rollouts: Rollouts
    writer: IngestWriter
    database_url: str
    nodes: Nodes | None = None  # the database nodes the series are spread over (HOTPATH_DB_NODES)
    enroll_port: int = 0  # where agents enrol, once the gRPC server listens
    bus: Bus | None = None  # started with the servers
    background: list[asyncio.Task[None]] = field(default_factory=list)  # the servers' background tasks
