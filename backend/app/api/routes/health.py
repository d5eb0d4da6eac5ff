# SPDX-License-Identifier: Apache-2.0
"""Liveness: answers without authentication so scripts and load balancers can wait for the backend."""
from fastapi import APIRouter
from sqlalchemy import text

from app.api.deps import SessionDep
from app.schemas import HealthStatus

router = APIRouter(prefix="/health", tags=["health"])


@router.get("", response_model=HealthStatus)
async def health(session: SessionDep) -> HealthStatus:
    """Report that the API and its database answer."""
    await session.execute(text("SELECT 1"))
    return HealthStatus(status="ok")
