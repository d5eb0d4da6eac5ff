# SPDX-License-Identifier: Apache-2.0
"""Catalog pieces by digest, for the console's code tree.

A piece is content-addressed (its digest is the SHA-256 of what it holds), so the document for a
digest never changes: it is served with an ETag equal to the digest and `Cache-Control: private,
max-age=one year, immutable`, so a browser asks once and a second visit downloads nothing; a
revalidation with If-None-Match gets 304. The document is built once per process, gzip-compressed once,
and kept in a small cache, so cold visits of many consoles cost one database read.
"""

import gzip
from collections import OrderedDict
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Request, Response

from app.api.deps import CurrentUser, SessionDep
from app.api.responses import NOT_FOUND, not_modified
from app.api.schemas import CatalogPublic
from app.storage import catalog

router = APIRouter(prefix="/catalogs", tags=["catalogs"])
Digest = Annotated[str, Path(pattern=r"^[0-9a-f]{1,64}$", description="The piece's digest (lower-case hex SHA-256)")]
IMMUTABLE = "private, max-age=31536000, immutable"
_CACHE_PIECES = 16
_cache: "OrderedDict[str, tuple[bytes, bytes]]" = OrderedDict()


def _cached(digest: str) -> tuple[bytes, bytes] | None:
    hit = _cache.get(digest)
    if hit is not None:
        _cache.move_to_end(digest)
    return hit


def _remember(digest: str, body: bytes) -> tuple[bytes, bytes]:
    entry = (body, gzip.compress(body, compresslevel=6, mtime=0))
    _cache[digest] = entry
    while len(_cache) > _CACHE_PIECES:
        _cache.popitem(last=False)
    return entry


@router.get(
    "/{digest}",
    response_model=CatalogPublic,
    responses={**NOT_FOUND, 304: {"description": "Not modified: the copy the client holds is this piece"}},
)
async def get_catalog(digest: Digest, request: Request, session: SessionDep, _: CurrentUser) -> Response:
    """One complete catalog piece in columns (functions in address order), cacheable forever."""
    etag = f'"{digest}"'
    headers = {"ETag": etag, "Cache-Control": IMMUTABLE, "Vary": "Accept-Encoding"}
    if not_modified(request, etag):
        return Response(status_code=304, headers=headers)
    entry = _cached(digest)
    if entry is None:
        body = await catalog.catalog_document(session, digest)
        if body is None:
            raise HTTPException(404, "Catalog piece not found (or not yet complete)")
        entry = _remember(digest, body)
    plain, packed = entry
    if "gzip" in request.headers.get("accept-encoding", "").lower():
        return Response(packed, media_type="application/json", headers={**headers, "Content-Encoding": "gzip"})
    return Response(plain, media_type="application/json", headers=headers)
