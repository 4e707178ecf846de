"""What computes embeddings, wherever it runs: the Embedder protocol that /v1/embeddings and vector store
indexing and search share (in this process in embedded mode, on a model's workers in distributed mode)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

#: One input: text, or the model's own token ids.
EmbeddingInput = str | Sequence[int]


class EmbeddingUnavailable(Exception):
    """The model cannot embed now: not declared, no worker serves it, or it did not answer in time (a 503)."""


class EmbeddingFailed(Exception):
    """The model could not embed these inputs (a token id out of its vocabulary, a load that failed)."""


@dataclass(frozen=True, slots=True)
class EmbeddingBatch:
    #: One vector per input, in order, each of length 1 (L2-normalised).
    vectors: list[list[float]]
    #: The tokens read, inputs as truncated to the model's context.
    prompt_tokens: int
    #: The model's own size of a vector.
    dimensions: int


class Embedder(Protocol):
    async def embed(self, model: str, inputs: Sequence[EmbeddingInput]) -> EmbeddingBatch:
        """Embed `inputs` with `model` (an embedding model id): EmbeddingUnavailable or EmbeddingFailed if not."""

    async def close(self) -> None: ...
