"""Admission beside a long prompt, on the real model (issue 27, finding 2): a short prompt submitted while a long
one is being read is read in the next steps, beside it, and answers first; in exact KV reuse mode too (one prompt
chunk a decode there)."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from app.config import Settings
from app.generation.engine import GenerationRequest, LlamaEngine
from app.generation.kv.reuse import KvReuseMode
from app.generation.types import Finish, GenerationFailed, GenerationOutput, SamplingParams

pytestmark = pytest.mark.integration

WORDS = "the of and river owl glass comet bread map bee tea lantern quiet orbit harbor meadow signal".split()  # noqa: SIM905


@pytest.mark.parametrize("kv_reuse", ["all", "exact"])
def test_a_short_prompt_beside_a_long_one_answers_first(kv_reuse: KvReuseMode) -> None:
    engine = LlamaEngine(Settings().resolved_model_path, n_ctx=8192, n_threads=2, slots=2, kv_reuse=kv_reuse)
    try:
        rng = random.Random(27)
        long_prompt = engine.tokenize(" ".join(rng.choice(WORDS) for _ in range(7000)) + "\nSay hi.")
        assert len(long_prompt) > 6000  # about 50 prefill steps of 128 tokens, 14 of 512
        first: list[str] = []  # who answered, in the order of their first output
        ended: dict[str, Finish | GenerationFailed] = {}
        short_answered, all_ended = threading.Event(), threading.Event()

        def emit_for(name: str) -> Any:
            def emit(output: GenerationOutput) -> None:
                if isinstance(output, Finish | GenerationFailed):
                    ended[name] = output
                    if len(ended) == 2:
                        all_ended.set()
                elif name not in first:
                    first.append(name)
                if name == "short":
                    short_answered.set()

            return emit

        sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=4)
        long_request = GenerationRequest(long_prompt, sampling, emit_for("long"), "tenant-a")
        engine.submit(long_request)
        # Submitted at once: the long prompt's first chunk may be read before it arrives, never the whole.
        engine.submit(GenerationRequest(engine.tokenize("Say hi."), sampling, emit_for("short"), "tenant-b"))
        assert short_answered.wait(300)
        assert "long" not in first, "the long prompt answered before the short one"
        long_request.cancelled.set()  # its order is known: no need to wait for the rest of its prefill
        assert all_ended.wait(300)
        assert first[0] == "short"
        short_end = ended["short"]
        assert isinstance(short_end, Finish) and short_end.output_tokens >= 1
    finally:
        engine.close()
