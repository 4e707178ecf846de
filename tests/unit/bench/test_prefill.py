"""bench/prefill.py's pure parts: a prompt rendered to exactly its size, and its rows in bench.run's table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from app.generation.prompt import ChatMessage
from bench.figures import figures_from
from bench.prefill import figures, make_prompt


class WordTokenizer:
    """A chat template of 3 tokens around the message, and one token a word ("Note 7:" is two)."""

    def render(self, messages: Sequence[ChatMessage]) -> list[int]:
        words = " ".join(str(message.content) for message in messages).split()
        return list(range(3 + len(words)))


@pytest.mark.parametrize("size", [6, 64, 2048])
def test_a_prompt_renders_to_exactly_its_size_and_each_nonce_starts_it_differently(size: int) -> None:
    tokenizer: Any = WordTokenizer()
    prompt = make_prompt(tokenizer, size, nonce=7)
    assert len(prompt.tokens) == size
    assert prompt.text.startswith("Note 7: ")
    assert make_prompt(tokenizer, size, nonce=8).text.startswith("Note 8: ")


def test_each_size_is_a_row_against_llama_server_and_raw_llama_cpp_a_row_under_it() -> None:
    measured = {
        "2048": {
            "stored": {"tokens_per_s": 900.0},
            "unstored": {"tokens_per_s": 950.0},
            "llama_server": {"tokens_per_s": 1000.0},
            "raw": {"tokens_per_s": 990.0},
        },
        "16384": {
            "stored": {"tokens_per_s": 500.0},
            "unstored": {"tokens_per_s": 510.0},
            "raw": {"tokens_per_s": 520.0},
        },
    }
    rows = {figure.name: figure for figure in figures_from({"prefill": {"figures": figures(measured)}}).figures}
    two_k = rows["prefill tokens/s, 2k-token prompt (to the first token)"]
    assert (two_k.stored, two_k.unstored, two_k.peer, two_k.met()) == (900.0, 950.0, 1000.0, False)
    sixteen_k = rows["prefill tokens/s, 16k-token prompt (to the first token)"]
    # llama-server caps a slot at SmolLM2's trained 8,192 tokens: the "8k" prompt is 8,000, and is named 8k
    eight_k = figures(
        {"8000": {"stored": {"tokens_per_s": 1.0}, "unstored": {"tokens_per_s": 1.0}, "raw": {"tokens_per_s": 1.0}}}
    )
    assert eight_k[0]["name"] == "prefill tokens/s, 8k-token prompt (to the first token)"
    assert (sixteen_k.peer, sixteen_k.met()) == (None, None)  # no llama-server in that run: cannot be told
    raw = [
        figure for figure in figures_from({"prefill": {"figures": figures(measured)}}).figures if "raw" in figure.name
    ]
    assert [(figure.stored, figure.peer, figure.target) for figure in raw] == [
        (990.0, 1000.0, None),
        (520.0, None, None),
    ]
