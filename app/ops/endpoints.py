"""The operator's routes: liveness (the process answers), readiness (its database and queue answer), worker
availability, and GET /metrics (Prometheus's text format, for admin keys only unless RESPONSES_METRICS_PUBLIC
opens it)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from app.api.deps import RuntimeDep
from app.ops.health import readiness, worker_availability
from app.ops.metrics import render_metrics

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


async def check_metrics_access(request: Request, runtime: RuntimeDep) -> None:
    """The whole server's figures: a 401 without a valid key and a 403 for a key that is not an admin's, on a keyed
    server; anyone on an open one."""
    if not runtime.settings.metrics_public:
        identity = await runtime.authenticator.identify(request.headers.get("authorization", ""))
        if identity.authenticated:
            identity.require_admin()


metrics_router = APIRouter(include_in_schema=False, dependencies=[Depends(check_metrics_access)])


@metrics_router.get("/metrics")
async def metrics(runtime: RuntimeDep) -> Response:
    body, content_type = await render_metrics(runtime)
    return Response(body, media_type=content_type)
