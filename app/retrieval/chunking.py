"""A text cut into overlapping chunks of at most `max_tokens` tokens, each the exact text between its first and
last token (whitespace and punctuation kept).

NOTE: tokens here are word pieces (a run of letters and digits, or one other visible character), not a model's
tokens: chunking is the same whichever models are configured, and a chunk of 800 of them is about 800-1000 of a
typical model's tokens. An embedding model reads at most its context of each chunk."""

from __future__ import annotations

import re
from dataclasses import dataclass

TOKEN = re.compile(r"\w+|[^\w\s]")

#: The hosted API's `auto` strategy, and the bounds of a `static` one.
AUTO_MAX_TOKENS = 800
AUTO_OVERLAP_TOKENS = 400
MIN_CHUNK_TOKENS = 100
MAX_CHUNK_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class Chunking:
    max_tokens: int = AUTO_MAX_TOKENS
    overlap_tokens: int = AUTO_OVERLAP_TOKENS


def chunk_text(text: str, chunking: Chunking) -> list[str]:
    """The chunks of `text`, in order: each starts `max_tokens - overlap_tokens` tokens after the one before."""
    spans = [(match.start(), match.end()) for match in TOKEN.finditer(text)]
    if not spans:
        return []
    step = max(chunking.max_tokens - chunking.overlap_tokens, 1)
    chunks = []
    start = 0
    while True:
        end = min(start + chunking.max_tokens, len(spans))
        chunks.append(text[spans[start][0] : spans[end - 1][1]])
        if end == len(spans):
            return chunks
        start += step
