# SPDX-License-Identifier: Apache-2.0
"""The HTTP API's outer guard, an ASGI middleware in front of every route:

- a request body larger than `max_body_bytes` is refused with 413 before it is read into memory
  (declared by Content-Length, or counted while it streams in);
- a path, query or JSON body (any Content-Type naming JSON, in any letter case, or none) carrying a
  NUL character, a lone UTF-16 surrogate or bytes that are not UTF-8 is refused with 400 (Postgres
  text cannot hold NUL, and UTF-8 cannot hold lone surrogates, so such input must never reach a route);
- every response carries security headers (no sniffing, no framing, no referrer, a same-origin
  content security policy, HSTS over HTTPS, no caching of API answers).
"""

import json
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson
from starlette.types import ASGIApp, Message, Receive, Send

Scope = dict[str, Any]

SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
    (
        b"content-security-policy",
        b"default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; "
        b"style-src 'self' 'unsafe-inline'; object-src 'none'; frame-ancestors 'none'; "
        b"base-uri 'self'",
    ),
]


def _bad_text(raw: bytes) -> str | None:
    """Why percent-decoded URL bytes are unacceptable, or None."""
    try:
        decoded = unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return "is not valid UTF-8"
    if "\x00" in decoded:
        return "contains a NUL character"
    return None


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


class RequestGuard:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body = max_body_bytes

    async def _refuse(self, send: Send, status: int, detail: str) -> None:
        body = orjson.dumps({"detail": detail})
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                    *SECURITY_HEADERS,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        for what, raw in (
            ("path", scope.get("raw_path") or scope["path"].encode(errors="surrogateescape")),
            ("query", scope.get("query_string", b"")),
        ):
            problem = _bad_text(raw)
            if problem:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await self._refuse(send, 400, f"The request {what} {problem}")
                return
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return

        headers = dict(scope.get("headers") or [])
        # Media types are case-insensitive (RFC 9110 8.3.1): "APPLICATION/JSON" is JSON to the route. A
        # body without a Content-Type, or with several, is checked too, whichever header a parser picks.
        content_types = [v.lower() for k, v in scope.get("headers") or [] if k.lower() == b"content-type"]
        json_body = not content_types or any(b"json" in v for v in content_types)
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_body
            except ValueError:
                await self._refuse(send, 400, "Invalid Content-Length")
                return
            if too_big:
                await self._refuse(send, 413, f"The request body is larger than {self.max_body} bytes")
                return
        # Read the body (bounded), check it, then replay it to the route.
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await self._refuse(send, 413, f"The request body is larger than {self.max_body} bytes")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body and json_body:
            problem = None
            if b"\x00" in body:
                problem = "The request body contains a NUL byte"
            else:
                try:
                    if _has_nul(orjson.loads(body)):
                        problem = "The request body contains a NUL character"
                except orjson.JSONDecodeError as exc:
                    if "surrogate" in str(exc) or "UTF-8" in str(exc):
                        problem = "The request body contains a lone surrogate or is not UTF-8"
                    else:
                        try:
                            json.loads(body)
                        except ValueError:
                            pass  # not JSON at all: the route answers that
            if problem:
                await self._refuse(send, 400, problem)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        https = scope.get("scheme") == "https"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = list(SECURITY_HEADERS)
                if https:
                    extra.append((b"strict-transport-security", b"max-age=31536000"))
                if scope["path"].startswith("/api/"):
                    extra.append((b"cache-control", b"no-store"))
                present = {k.lower() for k, _ in message.get("headers", [])}
                message = {
                    **message,
                    "headers": [*message.get("headers", []), *[(k, v) for k, v in extra if k not in present]],
                }
            await send(message)

        await self.app(scope, replay, send_with_headers)
