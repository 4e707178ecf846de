"""llama.cpp in embedding mode on the shipped SmolLM2 (a chat model: it declares no pooling, so its outputs are
mean-pooled): unit vectors of its 576 dimensions, related texts nearer than unrelated ones, token ids read back
into text, ids outside the vocabulary refused."""

from __future__ import annotations

import numpy as np
import pytest

from app.config import Settings
from app.generation.embeddings.base import EmbeddingFailed
from app.generation.embeddings.llama_embedder import LlamaEmbedder
from app.generation.embeddings.models import EmbeddingModelSpec

pytestmark = pytest.mark.integration


def test_smollm2_embeds_in_embedding_mode() -> None:
    embedder = LlamaEmbedder(
        EmbeddingModelSpec(id="smol", path=Settings(_env_file=None).resolved_model_path), n_threads=2
    )
    try:
        batch = embedder.embed(
            ["Income tax returns are due in April.", "When are taxes due?", "Plants turn light into sugar."]
        )
        vectors = np.asarray(batch.vectors)
        assert vectors.shape == (3, 576) and batch.dimensions == 576 and batch.prompt_tokens > 10
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
        assert vectors[1] @ vectors[0] > vectors[1] @ vectors[2]
        ids = embedder._llama.tokenize(b"When are taxes due?", add_bos=False)
        again = np.asarray(embedder.embed([ids]).vectors[0])
        assert float(again @ vectors[1]) > 0.999
        with pytest.raises(EmbeddingFailed, match="token ids"):
            embedder.embed([[10**9]])
    finally:
        embedder.close()
