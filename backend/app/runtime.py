# SPDX-License-Identifier: Apache-2.0
"""The live objects one backend process shares between its HTTP and gRPC sides: settings, database
session factory, signing key, the certificate authority, this replica's id, the WebSocket hub, the
registry of connected agents and the backend's own metrics.
Routes reach it through `request.app.state.runtime`; tests build their own."""
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.core.config import Settings
from app.live import LiveHub
from app.metrics import Metrics

if TYPE_CHECKING:
    from app.core.pki import Pki
    from app.grpc.agent_service import AgentRegistry


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
