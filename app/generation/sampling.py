"""One sequence's sampling on llama.cpp's own sampler chain (penalties, the output grammar, top_p, temperature, a
seed), and the logprobs a request asked for, from the model's row of logits."""

from __future__ import annotations

import ctypes
import math
import random
from collections.abc import Callable

import llama_cpp
import numpy as np

from app.generation.types import EngineError, SamplingParams, ScoredPiece


def sampler_chain(
    vocab: llama_cpp.llama_vocab_p, n_vocab: int, n_ctx: int, sampling: SamplingParams, written: list[int]
) -> llama_cpp.llama_sampler_p:
    """The sampler chain for `sampling`, having accepted `written` (the output of an earlier run)."""
    chain: llama_cpp.llama_sampler_p = llama_cpp.llama_sampler_chain_init(
        llama_cpp.llama_sampler_chain_default_params()
    )
    if sampling.presence_penalty or sampling.frequency_penalty:
        # Over the tokens generated so far (the chain accepts each sampled token); the prompt is not counted.
        llama_cpp.llama_sampler_chain_add(
            chain,
            llama_cpp.llama_sampler_init_penalties(
                n_vocab, n_ctx, 1.0, sampling.frequency_penalty, sampling.presence_penalty
            ),
        )
    grammar: llama_cpp.llama_sampler_p | None = None
    if sampling.grammar:
        grammar = llama_cpp.llama_sampler_init_grammar(vocab, sampling.grammar.encode(), b"root")
        if not grammar:
            llama_cpp.llama_sampler_free(chain)
            raise EngineError("llama.cpp could not parse the output grammar")
        llama_cpp.llama_sampler_chain_add(chain, grammar)
    if sampling.temperature <= 0:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
    else:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(sampling.temperature))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(random.getrandbits(32)))
    for token in written:
        # NOTE: llama.cpp's grammar throws (a C++ exception: the process aborts) on a token it cannot accept,
        # so each is checked first; text the grammar produced re-tokenizes into tokens it accepts.
        if grammar is not None and not grammar_allows(grammar, token):
            llama_cpp.llama_sampler_free(chain)
            raise EngineError("the output so far does not fit the output grammar")
        llama_cpp.llama_sampler_accept(chain, token)
    return chain


def grammar_allows(grammar: llama_cpp.llama_sampler_p, token: int) -> bool:
    """Whether the grammar, in its state now, lets `token` come next (it masks the token's logit otherwise)."""
    candidate = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
    array = llama_cpp.llama_token_data_array(candidate, 1, -1, False)
    llama_cpp.llama_sampler_apply(grammar, ctypes.byref(array))
    return bool(math.isfinite(candidate[0].logit))


def scored_piece(
    text: str,
    token: int,
    token_bytes: bytes,
    logits: np.ndarray,
    top_n: int,
    bytes_of: Callable[[int], bytes],
) -> ScoredPiece:
    """The token's logprob under the model's own distribution (log-softmax of its logits), and the top_n
    likeliest tokens' (`bytes_of`: a token's bytes)."""
    peak = float(logits.max())
    log_total = peak + math.log(float(np.exp(logits - peak).sum()))
    top: tuple[tuple[bytes, float], ...] = ()
    if top_n:
        best = np.argpartition(logits, -top_n)[-top_n:]
        best = best[np.argsort(-logits[best], kind="stable")]
        top = tuple((bytes_of(int(other)), float(logits[other]) - log_total) for other in best)
    return ScoredPiece(text, token_bytes, float(logits[token]) - log_total, top)
