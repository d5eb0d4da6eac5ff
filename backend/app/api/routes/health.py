# SPDX-License-Identifier: Apache-2.0
"""Liveness: answers without authentication so scripts and load balancers can wait for the backend.
503 while the database does not answer (for example while it restarts)."""

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.api.deps import RuntimeDep
from app.api.schemas import HealthStatus, Message

router = APIRouter(prefix="/health", tags=["health"])


@router.get("", response_model=HealthStatus, responses={503: {"model": Message}})
async def health(runtime: RuntimeDep) -> HealthStatus | JSONResponse:
    """Report that the API and its database answer."""
    try:
        async with asyncio.timeout(5):
            async with runtime.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
    except Exception:  # noqa: BLE001 - any failure means the database does not answer
        return JSONResponse({"detail": "The database is unavailable"}, status_code=503, headers={"Retry-After": "2"})
    return HealthStatus(status="ok")
