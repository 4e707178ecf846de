"""A fake embedding model for tests: each word hashed into one of `dimensions` buckets, the counts normalised, so
that texts sharing words are near and others far; deterministic, instant, no weights."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from app.config import Settings
from app.generation.embeddings.base import (
    Embedder,
    EmbeddingBatch,
    EmbeddingFailed,
    EmbeddingInput,
    EmbeddingUnavailable,
)
from app.generation.embeddings.models import EmbeddingModels
from app.main import EmbeddingsFactory
from app.retrieval.terms import WORD


def _bucket(word: str, dimensions: int) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little") % dimensions


class FakeEmbedder:
    """Embeds with every declared embedding model alike; `calls` records (model, inputs) of each call."""

    def __init__(self, models: EmbeddingModels, dimensions: int = 64) -> None:
        self.models = models
        self.dimensions = dimensions
        self.calls: list[tuple[str, list[EmbeddingInput]]] = []
        #: Set to make every call fail as a model with no worker would.
        self.unavailable = False

    def vector(self, item: EmbeddingInput) -> list[float]:
        counts = [0.0] * self.dimensions
        words = WORD.findall(item.lower()) if isinstance(item, str) else [str(token) for token in item]
        for word in words:
            counts[_bucket(word, self.dimensions)] += 1.0
        norm = math.sqrt(sum(value * value for value in counts)) or 1.0
        return [value / norm for value in counts]

    async def embed(self, model: str, inputs: Sequence[EmbeddingInput]) -> EmbeddingBatch:
        if self.unavailable:
            raise EmbeddingUnavailable(f"no worker serves the embedding model '{model}' now")
        if self.models.get(model) is None:
            raise EmbeddingFailed(f"embedding model '{model}' is not declared here")
        self.calls.append((model, list(inputs)))
        tokens = sum(len(WORD.findall(item)) if isinstance(item, str) else len(item) for item in inputs)
        return EmbeddingBatch([self.vector(item) for item in inputs], tokens, self.dimensions)

    async def close(self) -> None:
        return None


def fake_embeddings(holder: list[FakeEmbedder] | None = None) -> EmbeddingsFactory:
    """create_app's `embeddings` factory on a FakeEmbedder (appended to `holder`, for a test to reach)."""

    async def build(settings: Settings, models: EmbeddingModels) -> Embedder | None:
        embedder = FakeEmbedder(models)
        if holder is not None:
            holder.append(embedder)
        return embedder if len(models) else None

    return build
