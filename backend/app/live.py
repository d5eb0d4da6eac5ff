# SPDX-License-Identifier: Apache-2.0
"""A small in-process publish/subscribe hub for WebSocket pushes.

Each WebSocket gets a bounded queue of already-encoded JSON messages. Publishing never blocks the
agent stream that produced the event: a subscriber that falls behind loses its oldest messages, which
is right for live views (the next event carries the current state anyway).
"""
import asyncio
from typing import Any

import orjson

QUEUE_SIZE = 256


class LiveHub:
    def __init__(self) -> None:
        self._subscribers: set[asyncio.Queue[bytes]] = set()

    def subscribe(self) -> asyncio.Queue[bytes]:
        queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=QUEUE_SIZE)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[bytes]) -> None:
        self._subscribers.discard(queue)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def publish(self, event: dict[str, Any]) -> None:
        if not self._subscribers:
            return
        data = orjson.dumps(event)
        for queue in list(self._subscribers):
            if queue.full():
                try:
                    queue.get_nowait()
                except asyncio.QueueEmpty:
                    pass
            queue.put_nowait(data)
