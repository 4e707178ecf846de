"""Embeddings for a client: the input checked, embedded through the runtime's Embedder (the same path vector
stores use), cut to `dimensions` where the model allows it, and encoded as floats or base64."""

from __future__ import annotations

import base64
from collections.abc import Sequence

import numpy as np

from app.embeddings.schemas import (
    MAX_INPUTS,
    CreateEmbeddingRequest,
    CreateEmbeddingResponse,
    Embedding,
    EmbeddingUsage,
)
from app.errors import InvalidRequest, ServerError, ServiceUnavailable
from app.generation.embeddings.base import EmbeddingFailed, EmbeddingInput, EmbeddingUnavailable
from app.generation.embeddings.models import EmbeddingModelSpec
from app.runtime import Runtime


def _inputs(value: str | list[str] | list[int] | list[list[int]]) -> list[EmbeddingInput]:
    """The request's inputs, one each: a string, strings, one token array, or token arrays."""
    if isinstance(value, str):
        inputs: list[EmbeddingInput] = [value]
    elif value and all(isinstance(item, int) for item in value):
        inputs = [[item for item in value if isinstance(item, int)]]
    else:
        inputs = [item for item in value if not isinstance(item, int)]
    if not inputs:
        raise InvalidRequest("'input' may not be an empty list.", param="input", code="invalid_value")
    if len(inputs) > MAX_INPUTS:
        raise InvalidRequest(
            f"'input' may hold at most {MAX_INPUTS} inputs, got {len(inputs)}.", param="input", code="invalid_value"
        )
    for index, item in enumerate(inputs):
        if len(item) == 0:
            where = "input" if isinstance(value, str) else f"input[{index}]"
            raise InvalidRequest(f"'{where}' may not be empty.", param=where, code="invalid_value")
    return inputs


def _model(runtime: Runtime, name: str) -> EmbeddingModelSpec:
    spec = runtime.embedding_models.get(name)
    if spec is not None:
        return spec
    if runtime.models.get(name) is not None:
        raise InvalidRequest(
            f"The model '{name}' is not an embedding model (declare one in RESPONSES_EMBEDDING_MODELS or the "
            "models file's [[embedding_models]]).",
            param="model",
            code="model_not_found",
        )
    raise InvalidRequest(f"The requested model '{name}' does not exist.", param="model", code="model_not_found")


def _cut(vectors: Sequence[Sequence[float]], dimensions: int) -> np.ndarray:
    """The first `dimensions` values of each vector, each normalised to length 1 again."""
    matrix = np.asarray(vectors, dtype=np.float32)[:, :dimensions]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    cut: np.ndarray = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return cut


def _encode(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return [float(value) for value in vector]


async def create_embeddings(runtime: Runtime, body: CreateEmbeddingRequest) -> CreateEmbeddingResponse:
    spec = _model(runtime, body.model)
    inputs = _inputs(body.input)
    if runtime.embedder is None:
        raise ServiceUnavailable(f"No process here runs the embedding model '{spec.id}'.", code="model_unavailable")
    try:
        batch = await runtime.embedder.embed(spec.id, inputs)
    except EmbeddingUnavailable as error:
        raise ServiceUnavailable(f"The embedding model is unavailable: {error}.", code="model_unavailable") from None
    except EmbeddingFailed as error:
        message = str(error)
        if message.startswith("token ids"):
            raise InvalidRequest(f"Invalid 'input': {message}.", param="input", code="invalid_value") from None
        raise ServerError(f"The embedding model failed: {message}.") from None
    dimensions = body.dimensions or batch.dimensions
    if dimensions != batch.dimensions and not (spec.matryoshka and dimensions < batch.dimensions):
        raise InvalidRequest(
            f"The model '{spec.id}' makes {batch.dimensions}-dimension embeddings"
            + (" (fewer, where asked)." if spec.matryoshka else " only: it does not support 'dimensions'."),
            param="dimensions",
            code="invalid_value",
        )
    matrix = _cut(batch.vectors, dimensions)
    data = [Embedding(index=index, embedding=_encode(row, body.encoding_format)) for index, row in enumerate(matrix)]
    usage = EmbeddingUsage(prompt_tokens=batch.prompt_tokens, total_tokens=batch.prompt_tokens)
    return CreateEmbeddingResponse(data=data, model=spec.id, usage=usage)
