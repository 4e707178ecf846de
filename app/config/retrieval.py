"""Settings of embedding models and of vector stores' indexing and search."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class RetrievalSettings(BaseSettings):
    embedding_models: str | None = Field(
        None, description="Embedding models (llama.cpp embedding mode), 'id=path.gguf,...'; none: lexical search only."
    )
    vector_store_embedding_model: str | None = Field(
        None, description="The embedding model new vector stores use; default: the first declared; 'none': lexical."
    )
    embedding_timeout_s: float = Field(
        120.0, gt=0, description="How long an embedding waits for its model (a worker that serves it) before a 503."
    )
    vector_index_lease_s: float = Field(
        60.0, gt=0, description="How long a vector store file's indexing claim holds unrenewed (a lost process's)."
    )
    vector_index_max_attempts: int = Field(
        3, ge=1, description="Indexing starts a vector store file may take (lost ones) before it is `failed`."
    )
    vector_index_poll_s: float = Field(1.0, gt=0, description="Seconds between indexing rounds (workers, or embedded).")
    vector_cache_mb: float = Field(256.0, ge=0, description="MB of store embeddings kept between searches; 0: none.")
    vector_search_max_chunks: int = Field(
        100_000, ge=1, description="The most embedded chunks one search ranks by embedding; over it: lexically."
    )
