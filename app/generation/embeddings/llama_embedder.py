"""One embedding model in this process: llama.cpp in embedding mode, one call at a time (a context is not shared
between threads), each input truncated to the model's context and every vector L2-normalised."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import llama_cpp
import numpy as np

from app.config import Settings
from app.generation.embeddings.base import EmbeddingBatch, EmbeddingFailed, EmbeddingInput
from app.generation.embeddings.models import DEFAULT_EMBEDDING_CTX, EmbeddingModelSpec

POOLING = {
    None: llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED,
    "mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN,
    "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS,
    "last": llama_cpp.LLAMA_POOLING_TYPE_LAST,
}


def normalised(vector: np.ndarray) -> list[float]:
    norm = float(np.linalg.norm(vector))
    return [float(value) for value in (vector / norm if norm > 0 else vector)]


class LlamaEmbedder:
    """`spec`'s model loaded in embedding mode (blocking: build it in a thread)."""

    def __init__(self, spec: EmbeddingModelSpec, *, n_threads: int | None = None) -> None:
        self.spec = spec
        self._llama = self._open(spec, POOLING[spec.pooling], n_threads)
        if spec.pooling is None and int(self._llama.pooling_type()) == llama_cpp.LLAMA_POOLING_TYPE_NONE:
            # A causal LM declares no pooling (it was not trained to embed): llama.cpp averages its outputs.
            self._llama.close()
            self._llama = self._open(spec, llama_cpp.LLAMA_POOLING_TYPE_MEAN, n_threads)
        #: The tokens an input is truncated to: the context, within the model's trained one.
        self.n_ctx = self._llama.n_ctx()
        self.dimensions = self._llama.n_embd()
        self._vocab_size = self._llama.n_vocab()
        self._lock = threading.Lock()

    @staticmethod
    def _open(spec: EmbeddingModelSpec, pooling: int, n_threads: int | None) -> llama_cpp.Llama:
        n_ctx = spec.n_ctx or DEFAULT_EMBEDDING_CTX
        return llama_cpp.Llama(
            model_path=str(spec.path),
            embedding=True,
            pooling_type=pooling,
            # The whole input in one batch: a model that attends both ways reads a sequence in one ubatch.
            n_ctx=n_ctx,
            n_batch=n_ctx,
            n_ubatch=n_ctx,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            n_gpu_layers=spec.n_gpu_layers if spec.n_gpu_layers is not None else 0,
            verbose=False,
        )

    @classmethod
    def from_settings(cls, settings: Settings, spec: EmbeddingModelSpec) -> LlamaEmbedder:
        return cls(spec, n_threads=settings.n_threads_batch or settings.n_threads)

    def _text(self, item: EmbeddingInput) -> str:
        """An input as text: token ids (the model's own) are read back into the text they stand for.

        NOTE: llama-cpp-python embeds text only; ids round-trip through the model's detokenizer, and the text is
        tokenized again as text (never as control tokens)."""
        if isinstance(item, str):
            return item
        ids = list(item)
        if any(not 0 <= token < self._vocab_size for token in ids):
            raise EmbeddingFailed(f"token ids must be between 0 and {self._vocab_size - 1} for this model")
        return self._llama.detokenize(ids).decode("utf-8", errors="replace")

    def embed(self, inputs: Sequence[EmbeddingInput]) -> EmbeddingBatch:
        texts = [self._text(item) for item in inputs]
        if any(not text for text in texts):
            raise EmbeddingFailed("an input is empty (token ids that read back as no text)")
        with self._lock:
            vectors, tokens = self._llama.embed(texts, normalize=False, truncate=True, return_count=True)
        out = [normalised(np.asarray(vector, dtype=np.float64)) for vector in vectors]
        return EmbeddingBatch(out, int(tokens), self.dimensions)

    def close(self) -> None:
        self._llama.close()
