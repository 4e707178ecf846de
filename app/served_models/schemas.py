"""GET /v1/models on the wire: the SDK's Model and its list."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "llama-responses"
    # NOTE: extensions (left out when None; the SDK's Model keeps extra fields): distributed mode counts the
    # workers serving the model now, embedded mode says whether its weights are in memory now.
    live_workers: int | None = None
    loaded: bool | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
