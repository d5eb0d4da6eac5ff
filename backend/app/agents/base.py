# SPDX-License-Identifier: Apache-2.0
"""What every part of the agents' stream shares: the runtime, the registry of sessions, the audit log
and the hosts' live events.
"""

from typing import Any

from app.domain.sessions import AgentRegistry
from app.runtime import Runtime
from app.storage import audit_log
from app.storage import hosts as host_store


class StreamBase:
    def __init__(self, runtime: Runtime, registry: AgentRegistry) -> None:
        self.runtime = runtime
        self.registry = registry

    async def _audit(self, actor: str, action: str, target: str | None, detail: dict[str, Any]) -> None:
        async with self.runtime.sessionmaker() as db:
            audit_log.record(db, actor, action, target, detail)
            await db.commit()

    async def _publish_host(self, host_id: str) -> None:
        async with self.runtime.sessionmaker() as db:
            host = await host_store.get_host_public(db, host_id)
        if host is not None:
            self.runtime.hub.publish("hosts", {"type": "host", "host": host})
            self.runtime.hub.publish(f"host:{host_id}", {"type": "host", "host": host})
