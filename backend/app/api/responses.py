# SPDX-License-Identifier: Apache-2.0
"""A JSON response encoded with orjson from plain dicts and lists.

The large read paths (a whole kernel's function list is ~120k rows) build plain rows and return them
through this class, skipping per-row model validation; the routes still declare their response model
so the OpenAPI document and the console's generated client describe the exact shape.
"""

import gzip
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from app.api.schemas import Message

# Error responses every route of a kind can give, for the OpenAPI document (each carries {"detail": ...}).
Responses = dict[int | str, dict[str, Any]]
NOT_FOUND: Responses = {404: {"model": Message, "description": "No such host, function or resource"}}
SIGNED_IN: Responses = {401: {"model": Message, "description": "Not signed in, or the token expired"}}
ADMIN_ONLY: Responses = {
    **SIGNED_IN,
    403: {"model": Message, "description": "The signed-in user's role does not allow this"},
}
# What the request guard and the database handler can answer on any route.
GUARDED: Responses = {
    400: {"model": Message, "description": "A NUL character, lone surrogate or invalid UTF-8 in the request"},
    413: {"model": Message, "description": "The request body is larger than the limit"},
    503: {"model": Message, "description": "The database is unavailable (for example restarting)"},
}
BAD_BODY: Responses = {400: {"model": Message, "description": "The request body is not valid JSON"}}


class FastJSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def quick_gzip_json(request: Request, body: bytes | str, headers: dict[str, str], min_bytes: int = 0) -> Response:
    """A JSON reply gzipped at the fastest level where the client takes gzip and the body has at least
    min_bytes (the app's middleware leaves a reply it finds encoded alone, and its level takes longer on
    megabyte replies than the rest of their answer); `Vary: Accept-Encoding` either way."""
    data = body.encode() if isinstance(body, str) else body
    headers = {**headers, "Vary": "Accept-Encoding"}
    if len(data) >= min_bytes and "gzip" in request.headers.get("accept-encoding", "").lower():
        packed = gzip.compress(data, compresslevel=1, mtime=0)
        return Response(packed, media_type="application/json", headers={**headers, "Content-Encoding": "gzip"})
    return Response(data, media_type="application/json", headers=headers)


def not_modified(request: Request, etag: str) -> bool:
    """Whether the request's If-None-Match names the entity tag: weakly, as RFC 9110 compares for GET
    (`W/"x"` matches `"x"`), a list or `*`; a missing or malformed header matches nothing, so the body is
    sent."""
    tags = [t.strip() for t in request.headers.get("if-none-match", "").split(",")]
    return "*" in tags or etag in (t[2:] if t.startswith("W/") else t for t in tags)
