"""RESPONSES_N_THREADS_BATCH reaches llama.cpp: prompts read with their own thread count (llama-server's -tb)."""

from __future__ import annotations

import llama_cpp
import pytest

from app.config import Settings
from app.generation.engine import LlamaEngine
from app.generation.registry import ModelSpec

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("threads_batch", "expected"), [(2, 2), (None, 1)])
def test_prompts_get_their_own_threads_and_generation_s_by_default(threads_batch: int | None, expected: int) -> None:
    settings = Settings(
        n_threads=1, n_threads_batch=threads_batch, worker_concurrency=1, prefix_cache_mb=0, _env_file=None
    )
    engine = LlamaEngine.from_settings(settings, ModelSpec("m", settings.resolved_model_path, n_ctx=256))
    try:
        assert llama_cpp.llama_n_threads(engine._ctx) == 1
        assert llama_cpp.llama_n_threads_batch(engine._ctx) == expected
    finally:
        engine.close()
