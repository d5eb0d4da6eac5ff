# SPDX-License-Identifier: Apache-2.0
"""Limits on agents' streams: unauthenticated streams refused and audited at most once per peer address
and minute, and each stream's message rate.
"""

import asyncio
import logging
import time

import grpc
from sqlalchemy.exc import DBAPIError

from app.agents.base import StreamBase
from app.domain.sessions import AgentSession

log = logging.getLogger("hotpath.agents")


def peer_address(peer: str) -> str:
    """'ipv4:127.0.0.1:5555' -> 'ipv4:127.0.0.1' (the address without the port)."""
    return peer.rsplit(":", 1)[0] if peer.count(":") >= 2 else peer


class Throttling(StreamBase):
    async def _reject(
        self, context: grpc.aio.ServicerContext, peer: str, code: grpc.StatusCode, reason: str, host_id: str | None
    ) -> None:
        """End an unauthenticated stream; audit it, at most one record per peer address and minute."""
        address = peer_address(peer)
        now = time.monotonic()
        start, count = self.registry.auth_failures.get(address, (now, 0))
        if now - start > 60:
            start, count = now, 0
        self.registry.auth_failures[address] = (start, count + 1)
        if count == 0:
            log.warning("agent rejected from %s: %s", peer, reason)
            try:
                await self._audit(f"agent@{address}", "agent_auth_failed", host_id, {"peer": peer, "reason": reason})
            except (DBAPIError, OSError):
                log.warning("could not audit a rejected agent: the database is unavailable")
        await context.abort(code, reason)

    async def _throttle(self, session: AgentSession) -> None:
        """At most agent_messages_per_s data messages per second (bursts of ten seconds' worth): a
        stream above it is slowed down, and gRPC's flow control pushes back on the agent."""
        rate = self.runtime.settings.agent_messages_per_s
        now = time.monotonic()
        session.tokens = min(rate * 10, session.tokens + (now - session.refilled) * rate)
        session.refilled = now
        if session.tokens < 1:
            await asyncio.sleep((1 - session.tokens) / rate)
            session.tokens = 1
            session.refilled = time.monotonic()
        session.tokens -= 1
