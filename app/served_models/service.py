"""The served models: GET /v1/models and /v1/models/{id}, with what can run each now."""

from __future__ import annotations

from app.errors import NotFound
from app.generation.registry import ModelSpec
from app.runtime import Runtime
from app.served_models.schemas import ModelCard, ModelList


async def _cards(runtime: Runtime, specs: list[ModelSpec]) -> list[ModelCard]:
    availability = await runtime.queue.availability([spec.id for spec in specs])
    return [
        ModelCard(
            id=spec.id,
            created=spec.created,
            owned_by=spec.owned_by,
            live_workers=availability[spec.id].live_workers if not runtime.settings.embedded else None,
            loaded=availability[spec.id].loaded,
        )
        for spec in specs
    ]


async def list_models(runtime: Runtime) -> ModelList:
    return ModelList(data=await _cards(runtime, list(runtime.models)))


async def retrieve_model(runtime: Runtime, model_id: str) -> ModelCard:
    """A model by id or alias (an alias answers with the model it stands for)."""
    spec = runtime.models.get(model_id)
    if spec is None:
        raise NotFound(f"The model '{model_id}' does not exist", param="model", code="model_not_found")
    return (await _cards(runtime, [spec]))[0]
