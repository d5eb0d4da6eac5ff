# SPDX-License-Identifier: Apache-2.0
"""The console's live channel: a WebSocket that pushes what the views on screen show, and nothing else.

The console sends `{"type": "subscribe", "topics": [...]}` with the topics of its views (`hosts`,
`host:<id>`, `measurement:<id>`; each message replaces the set) and receives only their events (see
app.core.live): host changes, a host's per-interval sample summaries, gaps, targets and commands, a
measurement's intervals. Subscribing to `hosts` first sends every host as it stands.

Browsers cannot set headers on a WebSocket, so the access token comes as the `token` query parameter;
a bad one closes the socket with code 4401, and so does the token's expiry (or the user's deletion)
while the socket is open. A ping every 20 s keeps proxies from dropping idle sockets.

The socket is read-only: subscribe is the one message it reads. Anything else (a command-shaped message,
malformed JSON, topics that are not one of the three forms) is ignored and changes nothing; a binary
frame closes the socket with code 1003. Every action goes through REST, with its role and state checks.
"""

import asyncio
import logging
import re
import time
from datetime import UTC, datetime

import orjson
from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from app.api.deps import user_from_token
from app.core.security import token_expiry
from app.storage import hosts

router = APIRouter(tags=["live"])
log = logging.getLogger("hotpath.live")
CLOSE_UNAUTHENTICATED = 4401
TOPIC_RE = re.compile(r"^(hosts|host:[^\x00-\x1f]{1,256}|measurement:[0-9A-Za-z_-]{1,64})$")
MAX_TOPICS = 64
CLOSE_UNSUPPORTED = 1003  # RFC 6455: a data type the endpoint does not accept


@router.websocket("/ws")
async def live(websocket: WebSocket, token: str | None = None) -> None:
    runtime = websocket.app.state.runtime
    await websocket.accept()
    async with runtime.sessionmaker() as session:
        user = await user_from_token(runtime, session, token)
    if user is None:
        await websocket.close(code=CLOSE_UNAUTHENTICATED, reason="invalid or expired token")
        return
    sub = runtime.hub.subscribe()
    queue = sub.queue
    interval = runtime.settings.ws_ping_interval_s
    expires = token_expiry(runtime.secret_key, token or "") or 0.0

    async def read_client() -> None:
        # Subscriptions; anything else is ignored. Reading also notices the close promptly.
        while True:
            frame = await websocket.receive()
            if frame["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(frame.get("code", 1000))
            raw = frame.get("text")
            if raw is None:
                # A binary frame: the socket carries JSON text only (no command of any kind).
                await websocket.close(code=CLOSE_UNSUPPORTED, reason="the live socket takes text subscriptions only")
                return
            try:
                msg = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(msg, dict) or msg.get("type") != "subscribe" or not isinstance(msg.get("topics"), list):
                continue
            topics = {t for t in msg["topics"][:MAX_TOPICS] if isinstance(t, str) and TOPIC_RE.match(t)}
            new = topics - sub.topics
            runtime.hub.set_topics(sub, topics)
            if "hosts" in new:
                async with runtime.sessionmaker() as session:
                    for host in await hosts.list_hosts(session):
                        sub.put(orjson.dumps({"type": "host", "host": host}))

    reader = asyncio.create_task(read_client())
    try:
        while not reader.done():
            left = expires - time.time()
            if left <= 0:
                await websocket.close(code=CLOSE_UNAUTHENTICATED, reason="the token expired")
                break
            try:
                data = await asyncio.wait_for(queue.get(), timeout=min(interval, left))
            except TimeoutError:
                async with runtime.sessionmaker() as session:
                    if await user_from_token(runtime, session, token) is None:
                        await websocket.close(
                            code=CLOSE_UNAUTHENTICATED,
                            reason="the user no longer exists, was disabled or its token ended",
                        )
                        break
                data = orjson.dumps({"type": "ping", "at": datetime.now(UTC)})
            await websocket.send_text(data.decode())
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        runtime.hub.unsubscribe(sub)
        if sub.topics and runtime.hub.announce is not None:
            runtime.hub.announce()
        reader.cancel()
