# SPDX-License-Identifier: Apache-2.0
"""The replicas' message bus: Postgres LISTEN/NOTIFY on a connection of its own.

Every backend replica is stateless; the one that holds a host's agent stream is the only one that can
talk to that agent. A replica that accepts a command stores it and notifies `hotpath_commands` with the
host id, in the same transaction; every replica hears it and the one holding the stream sends it. When
a command finishes, `hotpath_command_done` carries its id, so a request waiting on another replica (an
inspect) wakes up. Live events for the console's WebSockets travel on `hotpath_live`, so a browser
connected to any replica sees every host. Notifications are hints: the command sweep also finds queued
commands by polling, so a notification lost while the bus reconnects delays a command, never loses it.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import psycopg

from app.core.tasks import cancel_and_wait

log = logging.getLogger("hotpath.bus")
COMMANDS = "hotpath_commands"
COMMAND_DONE = "hotpath_command_done"
LIVE = "hotpath_live"
CHANNELS = (COMMANDS, COMMAND_DONE, LIVE)
MAX_PAYLOAD = 7900  # Postgres allows 8000 bytes per notification


def psycopg_url(sqlalchemy_url: str) -> str:
    """postgresql+psycopg://... → postgresql://... for psycopg's own connect()."""
    return sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)


Handler = Callable[[str, str], Awaitable[None]]


class Bus:
    def __init__(self, url: str, replica_id: str, handler: Handler) -> None:
        self.url = psycopg_url(url)
        self.replica_id = replica_id
        self.handler = handler
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="bus")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        delay = 0.5
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    for channel in CHANNELS:
                        await conn.execute(f"LISTEN {channel}")
                    self.connected.set()
                    delay = 0.5
                    async for note in conn.notifies():
                        try:
                            await self.handler(note.channel, note.payload)
                        except Exception:  # noqa: BLE001 - one bad notification must not stop the bus
                            log.exception("handling a %s notification failed", note.channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the database restarts; listen again
                self.connected.clear()
                log.warning(
                    "the replicas' bus lost its connection (%s); reconnecting in %.1f s", type(exc).__name__, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)


def live_payload(replica_id: str, topic: str, event: dict[str, Any]) -> str:
    """A live event for other replicas; events too large for a notification go as a bare signal of
    their type and topic (the console then asks the REST API)."""
    data = orjson.dumps({"r": replica_id, "t": topic, "e": event}).decode()
    if len(data) > MAX_PAYLOAD:
        data = orjson.dumps(
            {"r": replica_id, "t": topic, "e": {"type": event.get("type", "signal"), "truncated": True}}
        ).decode()
    return data
