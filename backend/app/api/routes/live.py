# SPDX-License-Identifier: Apache-2.0
"""The console's live channel: a WebSocket that pushes host changes and per-interval sample summaries.

Browsers cannot set headers on a WebSocket, so the access token comes as the `token` query parameter;
a bad one closes the socket with code 4401, and so does the token's expiry (or the user's deletion)
while the socket is open. A ping every 20 s keeps proxies from dropping idle sockets.
"""
import asyncio
import logging
import time
from datetime import UTC, datetime

import orjson
from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from app import crud
from app.api.deps import user_from_token
from app.core.security import token_expiry

router = APIRouter(tags=["live"])
log = logging.getLogger("hotpath.live")
CLOSE_UNAUTHENTICATED = 4401


@router.websocket("/ws")
async def live(websocket: WebSocket, token: str | None = None) -> None:
    runtime = websocket.app.state.runtime
    await websocket.accept()
    async with runtime.sessionmaker() as session:
        user = await user_from_token(runtime, session, token)
        hosts = await crud.list_hosts(session) if user is not None else []
    if user is None:
        await websocket.close(code=CLOSE_UNAUTHENTICATED, reason="invalid or expired token")
        return
    queue = runtime.hub.subscribe()
    interval = runtime.settings.ws_ping_interval_s
    expires = token_expiry(runtime.secret_key, token or "") or 0.0
    user_id = user.id

    async def drain_client() -> None:
        # The console sends nothing we act on; reading notices the close promptly.
        while True:
            await websocket.receive_text()

    reader = asyncio.create_task(drain_client())
    try:
        for host in hosts:
            await websocket.send_text(orjson.dumps({"type": "host", "host": host}).decode())
        while not reader.done():
            left = expires - time.time()
            if left <= 0:
                await websocket.close(code=CLOSE_UNAUTHENTICATED, reason="the token expired")
                break
            try:
                data = await asyncio.wait_for(queue.get(), timeout=min(interval, left))
            except TimeoutError:
                async with runtime.sessionmaker() as session:
                    if await crud.get_user(session, user_id) is None:
                        await websocket.close(code=CLOSE_UNAUTHENTICATED, reason="the user no longer exists")
                        break
                data = orjson.dumps({"type": "ping", "at": datetime.now(UTC)})
            await websocket.send_text(data.decode())
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        runtime.hub.unsubscribe(queue)
        reader.cancel()
