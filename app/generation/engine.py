"""The llama.cpp generation loop: prompt tokens in, text pieces and a finish out; cancellable between tokens.

Not thread-safe: one engine belongs to one thread at a time (the queue backends see to that).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator
from pathlib import Path

import llama_cpp
from llama_cpp.llama_grammar import LlamaGrammar

from app.config import Settings
from app.generation.types import Finish, FinishReason, SamplingParams


def default_gpu_layers() -> int:
    """All layers on the GPU when llama.cpp was built with a GPU backend, else none."""
    return -1 if llama_cpp.llama_supports_gpu_offload() else 0


class LlamaEngine:
    def __init__(
        self, model_path: Path, *, n_ctx: int | None, n_threads: int | None, n_gpu_layers: int | None = None
    ) -> None:
        self._llm = llama_cpp.Llama(
            model_path=str(model_path),
            n_ctx=n_ctx or 0,
            n_threads=n_threads,
            n_gpu_layers=default_gpu_layers() if n_gpu_layers is None else n_gpu_layers,
            verbose=False,
        )
        self.n_ctx: int = self._llm.n_ctx()
        self._vocab = self._llm._model.vocab

    @classmethod
    def from_settings(cls, settings: Settings) -> LlamaEngine:
        return cls(
            settings.resolved_model_path,
            n_ctx=settings.n_ctx,
            n_threads=settings.n_threads,
            n_gpu_layers=settings.n_gpu_layers,
        )

    def _reusable_prefix(self, prompt: list[int]) -> int:
        """How many prompt tokens llama.cpp keeps from the last run (it always re-reads at least one)."""
        common = 0
        for cached, new in zip(self._llm._input_ids.tolist(), prompt, strict=False):
            if cached != new:
                break
            common += 1
        return min(common, len(prompt) - 1)

    def generate(
        self, prompt: list[int], sampling: SamplingParams, should_stop: Callable[[], bool]
    ) -> Iterator[str | Finish]:
        """Yield text pieces as they decode, then one Finish.

        `should_stop` is polled before every token: cancellation lands within one token.
        """
        budget = self.n_ctx - len(prompt)
        if sampling.max_output_tokens is not None:
            budget = min(budget, sampling.max_output_tokens)
        cached = self._reusable_prefix(prompt)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        produced = 0
        reason: FinishReason = "length"
        if should_stop():
            reason = "cancelled"
        elif budget > 0:
            grammar = LlamaGrammar.from_string(sampling.grammar, verbose=False) if sampling.grammar else None
            tokens = self._llm.generate(
                prompt,
                temp=sampling.temperature,
                top_p=sampling.top_p,
                top_k=0,
                min_p=0.0,
                repeat_penalty=1.0,
                grammar=grammar,
            )
            for token in tokens:
                if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                    reason = "stop"
                    break
                produced += 1
                piece = decoder.decode(self._llm.detokenize([token]))
                if piece:
                    yield piece
                if produced >= budget:
                    break
                if should_stop():
                    reason = "cancelled"
                    break
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail
        yield Finish(reason=reason, prompt_tokens=len(prompt), cached_tokens=cached, output_tokens=produced)
