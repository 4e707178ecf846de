"""GET /metrics: Prometheus's text format, behind the API's keys unless RESPONSES_METRICS_PUBLIC opens it."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from app.api.deps import RuntimeDep, SettingsDep, tenant_for
from app.services.metrics import render_metrics


async def check_metrics_access(request: Request, settings: SettingsDep) -> None:
    if not settings.metrics_public:
        tenant_for(request.headers.get("authorization", ""), settings)  # a 401 without a valid key, if keyed


router = APIRouter(include_in_schema=False, dependencies=[Depends(check_metrics_access)])


@router.get("/metrics")
async def metrics(runtime: RuntimeDep) -> Response:
    body, content_type = await render_metrics(runtime)
    return Response(body, media_type=content_type)
