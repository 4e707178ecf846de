"""The logprobs of a generation's tokens, by position in its text: what any span of the text reports.

The assembler cuts the model's text into parts (reasoning, answer, tool calls) and deltas at character
positions that need not fall between tokens (text held back around a tag, the whitespace after reasoning). A
span reports every token that overlaps it, cut to the span, so that a span's tokens always concatenate to
exactly its text; a token cut in two reports its logprob in both halves.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from app.generation.types import ScoredPiece
from app.schemas.events import EventLogprob, EventTopLogprob
from app.schemas.items import TokenLogprob, TopLogprob


@dataclass(slots=True)
class _Token:
    start: int
    end: int
    token_bytes: bytes
    logprob: float
    top: tuple[tuple[bytes, float], ...]


def _text_of(token_bytes: bytes) -> str:
    return token_bytes.decode("utf-8", errors="replace")


class TokenLogprobs:
    def __init__(self) -> None:
        self._tokens: list[_Token] = []
        self._starts: list[int] = []

    def add(self, piece: ScoredPiece, start: int) -> None:
        """A token whose text sits at `start` in the generation's text."""
        self._tokens.append(_Token(start, start + len(piece.text), piece.token_bytes, piece.logprob, piece.top))
        self._starts.append(start)

    def extend_last(self, end: int) -> None:
        """Text that came without a token (the decoder's flush of an unfinished character) joins the last one."""
        if self._tokens:
            self._tokens[-1].end = end

    def _overlapping(self, start: int, end: int) -> list[tuple[_Token, bool]]:
        """Tokens overlapping [start, end), each with whether the span cuts it."""
        found: list[tuple[_Token, bool]] = []
        index = bisect_left(self._starts, start)
        while index > 0 and self._tokens[index - 1].end > start:
            index -= 1
        while index < len(self._tokens) and self._tokens[index].start < end:
            token = self._tokens[index]
            index += 1
            empty_inside = token.start == token.end and token.start >= start
            if not empty_inside and token.end <= start:
                continue
            found.append((token, token.start < start or token.end > end))
        return found

    def for_part(self, text: str, start: int) -> list[TokenLogprob]:
        """The tokens of `text`, which sits at `start` in the generation's text, as output_text logprobs."""
        result: list[TokenLogprob] = []
        end = start + len(text)
        for token, cut in self._overlapping(start, end):
            low, high = max(token.start, start), min(token.end, end)
            piece = text[low - start : high - start]
            token_bytes = piece.encode() if cut else token.token_bytes
            result.append(
                TokenLogprob(
                    token=piece,
                    bytes=list(token_bytes),
                    logprob=token.logprob,
                    top_logprobs=[
                        TopLogprob(token=_text_of(other), bytes=list(other), logprob=logprob)
                        for other, logprob in token.top
                    ],
                )
            )
        return result

    def for_event(self, text: str, start: int) -> list[EventLogprob]:
        """The same for a delta or done event, in the shape the SDK's events declare (no bytes)."""
        return [
            EventLogprob(
                token=logprob.token,
                logprob=logprob.logprob,
                top_logprobs=[EventTopLogprob(token=top.token, logprob=top.logprob) for top in logprob.top_logprobs],
            )
            for logprob in self.for_part(text, start)
        ]
