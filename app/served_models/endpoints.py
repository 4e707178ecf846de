"""GET /v1/models and /v1/models/{model}: the models this deployment serves."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import RuntimeDep, TenantDep
from app.api.openapi import errors
from app.served_models.schemas import ModelCard, ModelList
from app.served_models.service import list_models, retrieve_model

router = APIRouter()


@router.get("/models", response_model_exclude_none=True)
async def list_served_models(runtime: RuntimeDep, _: TenantDep) -> ModelList:
    return await list_models(runtime)


# `:path`: model ids may hold a slash (org/model), as the hosted API's fine-tuned ids hold colons.
@router.get("/models/{model:path}", response_model_exclude_none=True, responses=errors(404))
async def retrieve_served_model(model: str, runtime: RuntimeDep, _: TenantDep) -> ModelCard:
    return await retrieve_model(runtime, model)
