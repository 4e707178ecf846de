"""gpt-oss's harmony format: the output is messages, each a header (its channel, and a recipient for a call) then
`<|message|>` and its content, ended by `<|end|>` (more follows: `<|start|>assistant` and the next header),
`<|call|>` or `<|return|>` (the end of the turn; the engine stops on both).

`analysis` is reasoning; `commentary` text is a message of phase `commentary` (what the model says before a call);
`final` is the answer (phase `final_answer`); a message to `functions.NAME` is a call, its content the arguments
(JSON). A message to another recipient (a built-in tool: `python`, `browser...`) is none of ours: left out.
"""

from __future__ import annotations

import re
from typing import Literal

from app.generation.dialects.readers import Arguments
from app.generation.dialects.segments import (
    CallStart,
    ParseOptions,
    Phase,
    ReasoningDelta,
    ReasoningEnd,
    Segment,
    TextDelta,
    TextEnd,
    held_back,
)

MESSAGE = "<|message|>"
CHANNEL = "<|channel|>"
START = "<|start|>"
#: What ends a message's content (the last two also end the turn: the engine stops on them).
ENDS = ("<|end|>", "<|call|>", "<|return|>")
#: What starts or decorates a header.
HEADER_MARKERS = (START, CHANNEL, MESSAGE, "<|constrain|>")
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")
#: Longest header to wait for before reading what came as text.
_LONGEST_HEADER = 512

Body = Literal["reasoning", "text", "call", "skip"]


class HarmonyParser:
    def __init__(self, options: ParseOptions) -> None:
        self._options = options
        self._raw = ""
        self._pos = 0
        self._in_header = True
        self._body: Body = "text"
        self._phase: Phase | None = None
        self._arguments: Arguments | None = None
        self._began = False

    def feed(self, piece: str) -> list[Segment]:
        start = len(self._raw)
        self._raw += piece
        if not self._in_header and self._pos == start and "<" not in piece:
            return self._body_text(len(self._raw))  # a message's content going on: no marker in it
        segments: list[Segment] = []
        while True:
            before = (self._in_header, self._pos)
            segments += self._header() if self._in_header else self._content()
            if (self._in_header, self._pos) == before:
                return segments

    def _header(self) -> list[Segment]:
        rest = self._raw[self._pos :]
        if not rest:
            return []
        opening = rest.lstrip()
        looks_like_header = opening.startswith((START, CHANNEL, "to=")) or any(
            marker.startswith(opening) for marker in (START, CHANNEL, "to=")
        )
        if not looks_like_header and not self._began:
            # No header at all: the model answered in plain text.
            self._in_header, self._body, self._phase = False, "text", None
            return []
        end = self._raw.find(MESSAGE, self._pos)
        if end < 0:
            if len(rest) > _LONGEST_HEADER:
                self._in_header, self._body = False, "text"
            return []
        header = self._raw[self._pos : end]
        self._pos, self._in_header, self._began = end + len(MESSAGE), False, True
        return self._open(header)

    def _open(self, header: str) -> list[Segment]:
        recipients = [found.group(1) for found in _RECIPIENT.finditer(header) if found.group(1) != "assistant"]
        channels = _CHANNEL.findall(header)  # `commentary to=assistant<|channel|>analysis`: the last one holds
        name = recipients[-1] if recipients else None
        if name is not None:
            called = name.removeprefix("functions.")
            if name.startswith("functions.") and called in self._options.tools:
                self._body, self._arguments = "call", Arguments(self._options.tools[called])
                return [CallStart(called)]
            self._body = "skip"
            return []
        kind = channels[-1] if channels else "final"
        if kind == "analysis":  # NOTE: harmony's reasoning is its channel: reasoning_format does not apply
            self._body = "reasoning"
        else:
            self._body = "text"
            self._phase = "commentary" if kind == "commentary" else "final_answer"
        return []

    def _content(self) -> list[Segment]:
        markers = (*ENDS, START)
        found = [(index, marker) for marker in markers if (index := self._raw.find(marker, self._pos)) >= 0]
        if not found:
            upto = len(self._raw) - held_back(self._raw, (*ENDS, *HEADER_MARKERS), self._pos)
            return self._body_text(upto)
        index, marker = min(found)
        segments = self._body_text(index)
        segments += self._close(complete=True)
        self._pos = index + (len(marker) if marker in ENDS else 0)
        self._in_header = True
        if marker == START:
            self._pos = index + len(START)
            # `<|start|>assistant`: the role is part of the next header, which its recipient may follow.
        return segments

    def _body_text(self, upto: int) -> list[Segment]:
        text = self._raw[self._pos : upto]
        start, self._pos = self._pos, max(self._pos, upto)
        if not text:
            return []
        if self._body == "reasoning":
            return [ReasoningDelta(text)]
        if self._body == "text":
            return [TextDelta(text, start, self._phase)]
        if self._body == "call":
            assert self._arguments is not None
            return self._arguments.add(text)
        return []

    def _close(self, *, complete: bool) -> list[Segment]:
        body, self._body = self._body, "skip"
        if body == "reasoning":
            return [ReasoningEnd()]
        if body == "text":
            return [TextEnd()]
        if body == "call":
            assert self._arguments is not None
            arguments, self._arguments = self._arguments, None
            return arguments.close(complete=complete)
        return []

    def end(self, *, cut: bool) -> list[Segment]:
        if self._in_header:
            return []
        segments = self._body_text(len(self._raw))
        if self._body == "call":
            # `<|call|>` ended the turn (the engine stopped on it): the call is whole unless the output was cut.
            return segments + self._close(complete=not cut)
        if self._body == "reasoning":
            return segments  # left open: the assembler closes it, incomplete
        return segments + self._close(complete=True)

    def in_reasoning(self) -> bool:
        return not self._in_header and self._body == "reasoning"

    def in_call(self) -> bool:
        return not self._in_header and self._body == "call"
