"""Embedding models in this process (embedded mode, or a worker that serves them): each loaded on first use in a
thread, once however many requests want it, and kept; each call runs in a thread off the event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from app.config import Settings
from app.generation.embeddings.base import EmbeddingBatch, EmbeddingFailed, EmbeddingInput, EmbeddingUnavailable
from app.generation.embeddings.models import EmbeddingModels, EmbeddingModelSpec

logger = logging.getLogger(__name__)


class LoadedEmbedder(Protocol):
    def embed(self, inputs: Sequence[EmbeddingInput]) -> EmbeddingBatch: ...

    def close(self) -> None: ...


#: Loads one model (blocking: it runs in a thread).
EmbedderLoader = Callable[[EmbeddingModelSpec], LoadedEmbedder]


class LocalEmbeddings:
    """An Embedder on this process's models."""

    def __init__(self, models: EmbeddingModels, load: EmbedderLoader) -> None:
        self.models = models
        self._load = load
        self._loaded: dict[str, asyncio.Task[LoadedEmbedder]] = {}

    @classmethod
    def from_settings(cls, settings: Settings, models: EmbeddingModels) -> LocalEmbeddings:
        from app.generation.embeddings.llama_embedder import LlamaEmbedder

        return cls(models, lambda spec: LlamaEmbedder.from_settings(settings, spec))

    async def _model(self, model: str) -> LoadedEmbedder:
        spec = self.models.get(model)
        if spec is None:
            raise EmbeddingUnavailable(f"embedding model '{model}' is not declared here")
        task = self._loaded.get(spec.id)
        if task is None or (task.done() and task.exception() is not None):
            task = self._loaded[spec.id] = asyncio.create_task(asyncio.to_thread(self._load, spec))
        try:
            # Shielded: a request that goes away does not cancel the load the others wait for.
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            logger.error("could not load embedding model %s: %s", spec.id, error)
            raise EmbeddingFailed(f"the embedding model '{spec.id}' could not be loaded: {error}") from error

    async def preload(self, model: str) -> None:
        await self._model(model)

    async def embed(self, model: str, inputs: Sequence[EmbeddingInput]) -> EmbeddingBatch:
        loaded = await self._model(model)
        return await asyncio.to_thread(loaded.embed, inputs)

    async def close(self) -> None:
        for task in self._loaded.values():
            if not task.done():
                task.cancel()
        await asyncio.gather(*self._loaded.values(), return_exceptions=True)
        for task in self._loaded.values():
            if task.done() and not task.cancelled() and task.exception() is None:
                await asyncio.to_thread(task.result().close)
        self._loaded.clear()
