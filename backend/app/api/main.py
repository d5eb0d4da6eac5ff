# SPDX-License-Identifier: Apache-2.0
"""The FastAPI application: REST and WebSocket routes under /api/v1, and the built console (a
single-page app) at / when a static folder with index.html is configured.

Behind the request guard (body limit, NUL and surrogate refusal, security headers). A database that
is down or restarting answers 503 on every route; validation errors (422) name the fields and never
echo the input back.
"""

import logging
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import TypeAdapter
from sqlalchemy.exc import DBAPIError, OperationalError

from app.api.guard import RequestGuard
from app.api.responses import ADMIN_ONLY, GUARDED, SIGNED_IN
from app.api.routes import (
    admin,
    auth,
    catalogs,
    fleet,
    functions,
    health,
    hosts,
    layout,
    live,
    measurements,
    plans,
    rollouts,
    samples,
    stacks,
    targets,
    users,
)
from app.api.schemas import LiveEvent
from app.core.metrics import CONTENT_TYPE, RequestMetrics
from app.runtime import Runtime

API_PREFIX = "/api/v1"
log = logging.getLogger("hotpath.api")


def operation_id(route: APIRoute) -> str:
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name


DOCS_DIR = Path(__file__).resolve().parents[3] / "docs"


def create_app(
    runtime: Runtime | None = None, static_dir: Path | None = None, docs_dir: Path | None = DOCS_DIR
) -> FastAPI:
    app = FastAPI(
        title="Hotpath",
        version="0.1.0",
        generate_unique_id_function=operation_id,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
        description="Web performance console for hot kernel paths: hosts, their targets and code "
        "catalog, live sample hotness, measurements, and agent commands.",
    )
    app.state.runtime = runtime
    api = APIRouter(prefix=API_PREFIX, responses=GUARDED)
    api.include_router(health.router)
    api.include_router(auth.router)
    api.include_router(users.router, responses=ADMIN_ONLY)
    api.include_router(users.audit_router, responses=ADMIN_ONLY)
    api.include_router(hosts.router, responses=SIGNED_IN)
    api.include_router(fleet.router, responses=SIGNED_IN)
    api.include_router(functions.router, responses=SIGNED_IN)
    api.include_router(admin.router, responses=ADMIN_ONLY)
    api.include_router(samples.router, responses=SIGNED_IN)
    api.include_router(stacks.router, responses=SIGNED_IN)
    api.include_router(catalogs.router, responses=SIGNED_IN)
    api.include_router(targets.router, responses=ADMIN_ONLY)
    api.include_router(layout.router, responses=SIGNED_IN)
    api.include_router(measurements.router, responses=ADMIN_ONLY)
    api.include_router(plans.router, responses=ADMIN_ONLY)
    api.include_router(rollouts.router, responses=ADMIN_ONLY)
    api.include_router(live.router)  # a WebSocket only: it closes with code 4401 without a valid token
    app.include_router(api)
    _install_error_handlers(app)
    _document_live_events(app)
    # JSON compresses ~5-10x; responses that set their own encoding (catalogs) pass through.
    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=5)
    if runtime is not None:
        app.add_middleware(RequestMetrics, metrics=runtime.metrics)
        _add_metrics_route(app, runtime)
    if docs_dir is not None and docs_dir.is_dir():
        _mount_docs(app, docs_dir.resolve())
    max_body = runtime.settings.max_body_bytes if runtime is not None else 1024 * 1024
    app.add_middleware(RequestGuard, max_body_bytes=max_body)
    if static_dir is not None and (static_dir / "index.html").is_file():
        _mount_console(app, static_dir.resolve())
    return app


def _install_error_handlers(app: FastAPI) -> None:
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", ()))[:6], "msg": str(e.get("msg", ""))[:200], "type": e.get("type", "")}
            for e in exc.errors()[:20]
        ]
        return JSONResponse({"detail": errors}, status_code=422)

    async def database_down(request: Request, exc: Exception) -> JSONResponse:
        log.warning("%s %s: the database is unavailable (%s)", request.method, request.url.path, type(exc).__name__)
        return JSONResponse(
            {"detail": "The database is unavailable; try again shortly"}, status_code=503, headers={"Retry-After": "2"}
        )

    async def database_error(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, DBAPIError) and exc.connection_invalidated:
            return await database_down(request, exc)
        log.error("%s %s: database error %s", request.method, request.url.path, type(exc).__name__)
        return JSONResponse({"detail": "Internal error (logged on the server)"}, status_code=500)

    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(OperationalError, database_down)
    app.add_exception_handler(ConnectionError, database_down)
    app.add_exception_handler(DBAPIError, database_error)


def _add_metrics_route(app: FastAPI, runtime: Runtime) -> None:
    token = runtime.settings.metrics_token

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        if token and request.headers.get("authorization", "") != f"Bearer {token}":
            raise HTTPException(401, "Not authenticated", headers={"WWW-Authenticate": "Bearer"})
        return Response(runtime.metrics.exposition(), media_type=CONTENT_TYPE)


def _mount_docs(app: FastAPI, root: Path) -> None:
    """The repository's documentation (Markdown as plain text, and its images), linked from the console's
    first screen. Public, like the login page: it describes the software, not any host."""

    @app.get("/docs/{name:path}", include_in_schema=False)
    async def docs(name: str) -> FileResponse:
        candidate = (root / (name or "architecture.md")).resolve()
        if not candidate.is_relative_to(root) or not candidate.is_file():
            raise HTTPException(404, "No such document")
        if candidate.suffix == ".md":
            return FileResponse(candidate, media_type="text/plain; charset=utf-8")
        return FileResponse(candidate)


def _mount_console(app: FastAPI, root: Path) -> None:
    index = root / "index.html"

    @app.get("/{path:path}", include_in_schema=False)
    async def console(path: str) -> FileResponse:
        if path in ("api", "metrics") or path.startswith(("api/", "docs/")):
            raise HTTPException(404, "Not found")
        candidate = (root / path).resolve()
        if path and candidate.is_relative_to(root) and candidate.is_file():
            return FileResponse(candidate)
        return FileResponse(index, headers={"Cache-Control": "no-cache"})


def _document_live_events(app: FastAPI) -> None:
    """Put the WebSocket's message types into the OpenAPI document's schemas (OpenAPI cannot describe
    a WebSocket route), so the console's generated client has them as types."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = plain()
            adapter = TypeAdapter(LiveEvent)
            events = adapter.json_schema(mode="serialization", ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, definition in events.pop("$defs", {}).items():
                components.setdefault(name, definition)
            components["LiveEvent"] = {**events, "description": "A message of the WebSocket at /api/v1/ws"}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
