# SPDX-License-Identifier: Apache-2.0
"""The FastAPI application: REST and WebSocket routes under /api/v1, and the built console (a
single-page app) at / when a static folder with index.html is configured."""
from pathlib import Path

from fastapi import APIRouter, FastAPI, HTTPException
from fastapi.responses import FileResponse
from fastapi.routing import APIRoute

from app.api.routes import auth, functions, health, hosts, live, users
from app.runtime import Runtime

API_PREFIX = "/api/v1"


def operation_id(route: APIRoute) -> str:
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name


def create_app(runtime: Runtime | None = None, static_dir: Path | None = None) -> FastAPI:
    app = FastAPI(title="Hotpath", version="0.1.0", generate_unique_id_function=operation_id,
                  openapi_url=f"{API_PREFIX}/openapi.json", docs_url=f"{API_PREFIX}/docs", redoc_url=None,
                  description="Web performance console for hot kernel paths: hosts, their code catalog, "
                              "live sample hotness, and agent commands.")
    app.state.runtime = runtime
    api = APIRouter(prefix=API_PREFIX)
    for module in (health, auth, users, hosts, functions, live):
        api.include_router(module.router)
    api.include_router(users.audit_router)
    app.include_router(api)
    if static_dir is not None and (static_dir / "index.html").is_file():
        _mount_console(app, static_dir.resolve())
    return app


def _mount_console(app: FastAPI, root: Path) -> None:
    index = root / "index.html"

    @app.get("/{path:path}", include_in_schema=False)
    async def console(path: str):
        if path == "api" or path.startswith("api/"):
            raise HTTPException(404, "Not found")
        candidate = (root / path).resolve()
        if path and candidate.is_relative_to(root) and candidate.is_file():
            return FileResponse(candidate)
        return FileResponse(index, headers={"Cache-Control": "no-cache"})
