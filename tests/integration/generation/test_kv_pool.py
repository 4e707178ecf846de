"""A KV pool smaller than its sequences' prompts and answers together (issue 26, item 2), on the real model:
when a step finds no room the youngest sequence is pushed out and goes on later, and every request still ends
with its whole answer, none failed, each token sent once.

Why not the same text as each prompt alone: in a unified pool a sequence's cells sit among the others' and
llama.cpp's attention sums (and its matrix products by batch size) round differently with other sequences
beside it, pushed out or not, so at temperature 0 an answer can take another path (kv/reuse.py says the same of
prefix reuse). What must hold whatever the rounding: the answer is complete, no token is lost or sent twice
across a push-out (the count of tokens and of text match the usage), and each token is the likeliest of the
logits it was sampled from (a resumed sequence samples from its own row)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from app.config import Settings
from app.generation.engine import GenerationRequest, LlamaEngine
from app.generation.kv.prefix_cache import PrefixCache
from app.generation.types import Finish, GenerationFailed, GenerationOutput, SamplingParams, ScoredPiece

pytestmark = pytest.mark.integration

ASKS = ("a river", "an owl", "a comet", "a lantern")
#: Two answers of this length and their prompts already need more than the pool's 256 cells (after the first
#: two, the others start only while the pool has room for them to grow: kv/pool.py's GROWTH_TOKENS).
OUTPUT_TOKENS = 150
POOL = 256


@pytest.mark.parametrize("cached", [False, True], ids=["recomputed", "restored"])
def test_sequences_overflowing_the_pool_all_complete(cached: bool) -> None:
    cache = PrefixCache(256 * 2**20) if cached else None
    path = Settings().resolved_model_path
    engine = LlamaEngine(path, n_ctx=None, n_threads=2, slots=4, kv_pool=POOL, prefix_cache=cache)
    try:
        assert engine.n_ctx == POOL  # a sequence may grow to the whole pool
        prompts = [
            engine.tokenize(f"<|im_start|>user\nWrite a long story about {ask}.<|im_end|>\n<|im_start|>assistant\n")
            for ask in ASKS
        ]
        pieces: list[list[ScoredPiece]] = [[] for _ in prompts]
        ends: dict[int, Finish | GenerationFailed] = {}
        done = threading.Event()

        def emit_for(index: int) -> Any:
            def emit(output: GenerationOutput) -> None:
                if isinstance(output, Finish | GenerationFailed):
                    ends[index] = output
                    if len(ends) == len(prompts):
                        done.set()
                else:
                    assert isinstance(output, ScoredPiece)
                    pieces[index].append(output)

            return emit

        sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=OUTPUT_TOKENS, top_logprobs=1)
        for index, prompt in enumerate(prompts):
            engine.submit(GenerationRequest(prompt, sampling, emit_for(index), "tenant"))
        assert done.wait(600)
        assert engine.pool.preempted > 0, "the pool never ran out: the test checks nothing"
        for index, prompt in enumerate(prompts):
            end = ends[index]
            assert isinstance(end, Finish)
            assert (end.reason, end.prompt_tokens, end.output_tokens) == ("length", len(prompt), OUTPUT_TOKENS)
            assert len(pieces[index]) == OUTPUT_TOKENS
            text = "".join(piece.text for piece in pieces[index])
            assert text == b"".join(piece.token_bytes for piece in pieces[index]).decode(errors="replace")
            for piece in pieces[index]:
                assert piece.top[0] == (piece.token_bytes, piece.logprob)
    finally:
        engine.close()
