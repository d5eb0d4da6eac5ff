# SPDX-License-Identifier: Apache-2.0
"""The FastAPI application: REST and WebSocket routes under /api/v1, and the built console (a
single-page app) at / when a static folder with index.html is configured."""
from pathlib import Path

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import FileResponse, Response
from fastapi.routing import APIRoute
from pydantic import TypeAdapter

from app.api.responses import ADMIN_ONLY, SIGNED_IN
from app.api.routes import auth, catalogs, functions, health, hosts, live, samples, users
from app.metrics import CONTENT_TYPE, RequestMetrics
from app.runtime import Runtime
from app.schemas import LiveEvent

API_PREFIX = "/api/v1"


def operation_id(route: APIRoute) -> str:
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name


DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"


def create_app(runtime: Runtime | None = None, static_dir: Path | None = None,
               docs_dir: Path | None = DOCS_DIR) -> FastAPI:
    app = FastAPI(title="Hotpath", version="0.1.0", generate_unique_id_function=operation_id,
                  openapi_url=f"{API_PREFIX}/openapi.json", docs_url=f"{API_PREFIX}/docs", redoc_url=None,
                  description="Web performance console for hot kernel paths: hosts, their code catalog, "
                              "live sample hotness, and agent commands.")
    app.state.runtime = runtime
    api = APIRouter(prefix=API_PREFIX)
    api.include_router(health.router)
    api.include_router(auth.router)
    api.include_router(users.router, responses=ADMIN_ONLY)
    api.include_router(users.audit_router, responses=ADMIN_ONLY)
    api.include_router(hosts.router, responses=SIGNED_IN)
    api.include_router(functions.router, responses=SIGNED_IN)
    api.include_router(samples.router, responses=SIGNED_IN)
    api.include_router(catalogs.router, responses=SIGNED_IN)
    api.include_router(live.router)  # a WebSocket only: it closes with code 4401 without a valid token
    app.include_router(api)
    _document_live_events(app)
    # JSON compresses ~5-10x; responses that set their own encoding (catalogs) pass through.
    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=5)
    if runtime is not None:
        app.add_middleware(RequestMetrics, metrics=runtime.metrics)
        _add_metrics_route(app, runtime)
    if docs_dir is not None and docs_dir.is_dir():
        _mount_docs(app, docs_dir.resolve())
    if static_dir is not None and (static_dir / "index.html").is_file():
        _mount_console(app, static_dir.resolve())
    return app


def _add_metrics_route(app: FastAPI, runtime: Runtime) -> None:
    token = runtime.settings.metrics_token

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request):
        if token and request.headers.get("authorization", "") != f"Bearer {token}":
            raise HTTPException(401, "Not authenticated", headers={"WWW-Authenticate": "Bearer"})
        return Response(runtime.metrics.exposition(), media_type=CONTENT_TYPE)


def _mount_docs(app: FastAPI, root: Path) -> None:
    """The repository's documentation (Markdown as plain text, and its images), linked from the console's
    first screen. Public, like the login page: it describes the software, not any host."""

    @app.get("/docs/{name:path}", include_in_schema=False)
    async def docs(name: str):
        candidate = (root / (name or "architecture.md")).resolve()
        if not candidate.is_relative_to(root) or not candidate.is_file():
            raise HTTPException(404, "No such document")
        if candidate.suffix == ".md":
            return FileResponse(candidate, media_type="text/plain; charset=utf-8")
        return FileResponse(candidate)


def _mount_console(app: FastAPI, root: Path) -> None:
    index = root / "index.html"

    @app.get("/{path:path}", include_in_schema=False)
    async def console(path: str):
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

    def openapi() -> dict:
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

    app.openapi = openapi
