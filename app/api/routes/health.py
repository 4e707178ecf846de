"""Liveness (the process answers), readiness (its database and queue answer) and worker availability."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.api.deps import RuntimeDep
from app.services.health import readiness, worker_availability

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready", responses={503: {"description": "Not ready: `checks` says what is missing."}})
async def ready(runtime: RuntimeDep) -> JSONResponse:
    is_ready, body = await readiness(runtime)
    return JSONResponse(body, status_code=200 if is_ready else 503)


@router.get("/health/workers")
async def workers(runtime: RuntimeDep) -> JSONResponse:
    """503 while no worker is alive: foreground creates are refused then; reads and background creates are not."""
    available, body = await worker_availability(runtime)
    return JSONResponse(body, status_code=200 if available else 503)
