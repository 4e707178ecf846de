"""Liveness (the process answers) and readiness (database, queue and a worker reachable)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.api.deps import RuntimeDep
from app.services.health import readiness

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready", responses={503: {"description": "Not ready: `checks` says what is missing."}})
async def ready(runtime: RuntimeDep) -> JSONResponse:
    is_ready, body = await readiness(runtime)
    return JSONResponse(body, status_code=200 if is_ready else 503)
