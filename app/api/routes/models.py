"""GET /v1/models: the one model this deployment serves."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import RuntimeDep, TenantDep
from app.schemas.responses import ModelCard, ModelList

router = APIRouter()


@router.get("/models")
async def list_models(runtime: RuntimeDep, _: TenantDep) -> ModelList:
    return ModelList(data=[ModelCard(id=runtime.model_id, created=runtime.model_created)])
