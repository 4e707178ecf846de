"""/v1/embeddings' wire format, named and shaped as the SDK's EmbeddingCreateParams and CreateEmbeddingResponse."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

#: Inputs in one request at most (as hosted).
MAX_INPUTS = 2048


class CreateEmbeddingRequest(BaseModel):
    input: str | list[str] | list[int] | list[list[int]]
    model: str = Field(min_length=1)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    # NOTE: accepted as the SDK sends it; nothing here reads it.
    user: str | None = None


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    #: The floats, or their little-endian float32 bytes in base64 (encoding_format "base64").
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class CreateEmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
