# SPDX-License-Identifier: Apache-2.0
"""A publish/subscribe hub for WebSocket pushes, by topic.

A console view subscribes to what it shows, and receives only that:
- `hosts`: host changes (the host list; a host page's header),
- `host:<id>`: that host's per-interval samples, gaps, targets and commands,
- `measurement:<id>`: that measurement's intervals and state.
Each WebSocket gets a bounded queue of already-encoded JSON messages. Publishing never blocks the agent
stream that produced the event: a subscriber that falls behind loses its oldest messages, which is right
for live views (the next event carries the current state anyway). Replicas tell each other which topics
their sockets want (`interest`, on the replicas' bus, refreshed while anyone listens); an event a
socket on another replica wants is handed to `fanout` (the bus), so a browser connected to any
replica sees every host, and events from other replicas come back through `deliver`. An event nobody
wants anywhere costs nothing.
"""

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson

QUEUE_SIZE = 256
MAX_TOPICS = 64
INTEREST_TTL_S = 60.0  # another replica's interest lapses unless refreshed


class Subscriber:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=QUEUE_SIZE)
        self.topics: set[str] = set()

    def put(self, data: bytes) -> None:
        if self.queue.full():
            try:
                self.queue.get_nowait()
            except asyncio.QueueEmpty:
                pass
        self.queue.put_nowait(data)


class LiveHub:
    def __init__(self) -> None:
        self._subscribers: set[Subscriber] = set()
        self.fanout: Callable[[str, dict[str, Any]], None] | None = None
        self.announce: Callable[[], None] | None = None  # tell other replicas our interest
        self._remote: dict[str, tuple[float, frozenset[str]]] = {}  # replica -> (expires, topics)

    def subscribe(self) -> Subscriber:
        sub = Subscriber()
        self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self._subscribers.discard(sub)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def local_topics(self) -> set[str]:
        out: set[str] = set()
        for s in self._subscribers:
            out |= s.topics
        return out

    def set_topics(self, sub: Subscriber, topics: set[str]) -> None:
        changed = topics != sub.topics
        sub.topics = topics
        if changed and self.announce is not None:
            self.announce()

    def remote_interest(self, replica: str, topics: list[str]) -> None:
        self._remote[replica] = (time.monotonic() + INTEREST_TTL_S, frozenset(topics[:4096]))

    def _remote_wants(self, topic: str) -> bool:
        now = time.monotonic()
        return any(exp > now and topic in topics for exp, topics in self._remote.values())

    def wants(self, topic: str) -> bool:
        """Whether a socket here or on another replica wants the topic."""
        return any(topic in s.topics for s in self._subscribers) or self._remote_wants(topic)

    def deliver(self, topic: str, event: dict[str, Any]) -> None:
        """Push an event to this replica's subscribers of its topic."""
        data: bytes | None = None
        for sub in list(self._subscribers):
            if topic in sub.topics:
                if data is None:
                    data = orjson.dumps(event)
                sub.put(data)

    def publish(self, topic: str, event: dict[str, Any]) -> None:
        """Push an event to its topic's subscribers on every replica."""
        self.deliver(topic, event)
        if self.fanout is not None and self._remote_wants(topic):
            self.fanout(topic, event)
