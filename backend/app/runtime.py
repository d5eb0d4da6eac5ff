# SPDX-License-Identifier: Apache-2.0
"""The live objects one backend process shares between its HTTP and gRPC sides: settings, database
session factory, signing key, agent token, the WebSocket hub, the registry of connected agents and the
backend's own metrics.
Routes reach it through `request.app.state.runtime`; tests build their own."""
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.core.config import Settings
from app.live import LiveHub
from app.metrics import Metrics


@dataclass
class Runtime:
    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    secret_key: bytes
    agent_token: str
    hub: LiveHub = field(default_factory=LiveHub)
    metrics: Metrics = field(default_factory=Metrics)
    agents: "object" = None  # app.grpc.agent_service.AgentRegistry, set by create_runtime
