"""The parser most families share: an optional reasoning section between tags at the start, the answer (markers
around it dropped), and calls, each opened by a marker (inside a section's markers, for some) and read by the
family's call reader. Also the parser of a model offered no tools and no reasoning: all of it is answer."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from app.generation.dialects.json_args import skip_space
from app.generation.dialects.readers import CallReader, ReaderFactory
from app.generation.dialects.segments import (
    CallEnd,
    ParseOptions,
    ReasoningDelta,
    ReasoningEnd,
    Segment,
    TextDelta,
    find_first,
    held_back,
)


@dataclass(frozen=True, slots=True)
class TaggedSyntax:
    #: Markers that open a call; the reader reads from after the marker.
    call_markers: tuple[str, ...]
    reader: ReaderFactory
    #: The marker closing a call after what its reader read (skipped when written).
    call_close: str = ""
    #: Markers around all the calls (the first opens the section, the second closes it).
    section: tuple[str, str] | None = None
    #: Markers around the answer (Command R7B's, Granite 3.3's): dropped.
    answer_markers: tuple[str, ...] = ()
    #: An answer that opens with `{` may be a call object (Llama 3's calls have no marker).
    bare_json: bool = False
    #: Markers that open a call and are part of it (the reader reads from the marker): Qwen3-Coder's model may
    #: leave out `<tool_call>` and start at `<function=`.
    inner_markers: tuple[str, ...] = ()
    #: A call ends the reasoning section even where the model opened it (Kimi K2 Thinking calls from inside it).
    calls_end_reasoning: bool = False


State = Literal["start", "reasoning", "text", "call", "between"]


class PlainParser:
    """No tools and no reasoning: every piece is answer text as it comes (the per-token path of the plain case)."""

    def __init__(self) -> None:
        self._length = 0

    def feed(self, piece: str) -> list[Segment]:
        start = self._length
        self._length += len(piece)
        return [TextDelta(piece, start)] if piece else []

    def end(self, *, cut: bool) -> list[Segment]:
        return []

    def in_call(self) -> bool:
        return False

    def in_reasoning(self) -> bool:
        return False


class TaggedParser:
    def __init__(self, syntax: TaggedSyntax, options: ParseOptions, reasoning: tuple[str, str] | None) -> None:
        self._syntax = syntax
        self._options = options
        self._tools = bool(options.tools)
        self._reasoning = reasoning if options.reasoning else None
        self._raw = ""
        self._pos = 0
        self._state: State = "start"
        self._reader: CallReader | None = None
        self._call_from = 0
        self._call_marker = ""
        self._bare_tried = not syntax.bare_json
        self._answered = False
        self._reasoning_began = False
        markers = list(syntax.answer_markers)
        if self._tools:
            markers += (*syntax.call_markers, *syntax.inner_markers)
            if syntax.section is not None:
                markers.append(syntax.section[0])
        self._text_markers = tuple(markers)
        #: What a marker may start with: a piece without any of these is text at once (see feed).
        self._marker_start = re.compile(
            "[" + "".join(re.escape(marker[0]) for marker in markers) + "]" if markers else "(?!)"
        )
        # Calls end a reasoning section the prompt opened (a model may call without closing it); one the model
        # opened itself holds whatever it writes up to its close.
        self._reasoning_ends: tuple[str, ...] = (
            tuple(marker for marker in markers if marker not in syntax.answer_markers)
            if options.reasoning_open or syntax.calls_end_reasoning
            else ()
        )
        ending = (self._reasoning[1], *self._reasoning_ends) if self._reasoning else ()
        self._reasoning_start = re.compile(
            "[" + "".join(re.escape(marker[0]) for marker in ending) + "]" if ending else "(?!)"
        )
        self._call_opening = (*syntax.call_markers, *syntax.inner_markers) if self._tools else ()

    def feed(self, piece: str) -> list[Segment]:
        start = len(self._raw)
        self._raw += piece
        if self._state == "text" and self._pos == start and self._bare_tried and not self._marker_start.search(piece):
            # The common case: answer text that holds no character a marker starts with, nothing held back.
            self._pos += len(piece)
            self._answered = self._answered or not piece.isspace()
            return [TextDelta(piece, start)] if piece else []
        if (
            self._state == "reasoning"
            and self._pos == start
            and self._reasoning_began
            and not self._reasoning_start.search(piece)
            and not piece[-1:].isspace()
        ):
            self._pos += len(piece)  # reasoning going on: no marker, nothing held back
            return [ReasoningDelta(piece)] if piece else []
        segments: list[Segment] = []
        while True:
            state, position = self._state, self._pos
            segments += self._step()
            if self._state == state and self._pos == position:
                return segments

    def _step(self) -> list[Segment]:
        if self._state == "start":
            return self._start()
        if self._state == "reasoning":
            return self._reason()
        if self._state == "text":
            return self._text()
        if self._state == "call":
            return self._call()
        return self._between()

    # Reasoning ------------------------------------------------------------------------------------------------

    def _start(self) -> list[Segment]:
        if self._reasoning is None:
            self._state = "text"
            return []
        if self._options.reasoning_open:
            self._state = "reasoning"
            self._pos = skip_space(self._raw, self._pos)
            return []
        index = skip_space(self._raw, self._pos)
        rest = self._raw[index:]
        opening = self._reasoning[0]
        if rest.startswith(opening):
            self._state = "reasoning"
            self._pos = index + len(opening)
        elif not opening.startswith(rest):
            self._state = "text"
        return []

    def _reason(self) -> list[Segment]:
        assert self._reasoning is not None
        closing = self._reasoning[1]
        if not self._reasoning_began:  # whitespace after the opening tag is not reasoning
            start = skip_space(self._raw, self._pos)
            if start == len(self._raw):
                return []
            self._pos, self._reasoning_began = start, True
        # A call ends the reasoning too (a model whose prompt opened it may call without closing it).
        close, marker = find_first(self._raw, (closing, *self._reasoning_ends), self._pos)
        if close < 0:
            upto = len(self._raw) - held_back(self._raw, (closing, *self._reasoning_ends), self._pos)
            # Whitespace waits for what follows it: before the close it is no reasoning.
            upto = max(len(self._raw[:upto].rstrip()), self._pos)
            text, self._pos = self._raw[self._pos : upto], max(upto, self._pos)
            return [ReasoningDelta(text)] if text else []
        if marker != closing:
            text = self._raw[self._pos : close].rstrip()
            self._pos, self._state = close, "text"
            return [*([ReasoningDelta(text)] if text else []), ReasoningEnd()]
        text = self._raw[self._pos : close].rstrip()
        self._pos, self._state = close + len(closing), "text"
        return [*([ReasoningDelta(text)] if text else []), ReasoningEnd()]

    # The answer -----------------------------------------------------------------------------------------------

    def _emit(self, upto: int) -> list[Segment]:
        text = self._raw[self._pos : upto]
        start = self._pos
        self._pos = max(self._pos, upto)
        if not text:
            return []
        self._answered = self._answered or bool(text.strip())
        return [TextDelta(text, start)]

    def _text(self) -> list[Segment]:
        if not self._bare_tried and self._tools and not self._answered:
            index = skip_space(self._raw, self._pos)
            if index == len(self._raw):
                return []
            self._bare_tried = True
            if self._raw[index] == "{":
                segments = self._emit(index)
                self._open_call(index, "")
                return segments
        index, marker = find_first(self._raw, self._text_markers, self._pos)
        if index < 0:
            return self._emit(len(self._raw) - held_back(self._raw, self._text_markers, self._pos))
        segments = self._emit(index)
        rest = self._raw[index:]
        if any(len(longer) > len(rest) and longer.startswith(rest) for longer in self._text_markers):
            return segments  # a longer marker may still be coming (Gemma's `<|channel>` then `thought`)
        if marker in self._call_opening:
            self._open_call(index, marker)
        elif self._syntax.section is not None and marker == self._syntax.section[0] and self._tools:
            self._pos, self._state = index + len(marker), "between"
        else:  # a marker around the answer
            self._pos = index + len(marker)
        return segments

    # Calls ------------------------------------------------------------------------------------------------------

    def _open_call(self, index: int, marker: str) -> None:
        self._call_from, self._call_marker = index, marker
        inner = marker in self._syntax.inner_markers
        self._reader = self._syntax.reader(index if inner else index + len(marker), self._options)
        self._state = "call"
        self._pos = index

    def _call(self) -> list[Segment]:
        assert self._reader is not None
        segments, state = self._reader.read(self._raw)
        if state == "more":
            return segments
        if state == "text":  # no call after all: its markup is text
            self._reader = None
            self._state = "text"
            if not self._call_marker:  # a bare `{`: read as text from here
                return segments
            self._pos = self._call_from
            return [*segments, *self._emit(self._call_from + len(self._call_marker))]
        end = self._reader.end
        closing = skip_space(self._raw, end)
        if self._syntax.call_close and self._raw.startswith(self._syntax.call_close, closing):
            end = closing + len(self._syntax.call_close)
        self._pos, self._reader, self._state = self._reader.end, None, "between"
        if segments and isinstance(segments[-1], CallEnd):  # the call as written, for what cannot be a call
            last = segments[-1]
            segments[-1] = replace(last, markup=self._raw[self._call_from : end], markup_at=self._call_from)
        return segments

    def _between(self) -> list[Segment]:
        """After a call: its closing marker, the section's, more calls, or text again."""
        index = skip_space(self._raw, self._pos)
        rest = self._raw[index:]
        if not rest:
            return []
        closing = [marker for marker in (self._syntax.call_close, *(self._syntax.section or ())[1:]) if marker]
        for marker in closing:
            if rest.startswith(marker):
                self._pos = index + len(marker)
                return []
        for marker in self._call_opening:
            if rest.startswith(marker):
                self._open_call(index, marker)
                return []
        if self._syntax.bare_json and rest.startswith(("{", ";")):  # another bare call (Llama 3 writes `;`)
            if rest.startswith(";"):
                self._pos = index + 1
                return []
            self._open_call(index, "")
            return []
        if any(marker.startswith(rest) for marker in (*closing, *self._call_opening)):
            return []
        self._state, self._answered = "text", False
        return []

    # The end ------------------------------------------------------------------------------------------------------

    def end(self, *, cut: bool) -> list[Segment]:
        if self._state == "start":
            if cut and self._reasoning is not None and self._reasoning[0].startswith(self._raw[self._pos :].strip()):
                return []  # the reasoning's opening tag, cut: markup, not text
            self._state = "text"
        if self._state == "reasoning":
            text = self._raw[self._pos :]
            self._pos = len(self._raw)
            return [ReasoningDelta(text)] if text else []
        if self._state == "call":
            assert self._reader is not None
            if self._reader.opened:
                return self._reader.cut(self._raw)
            if cut:
                return []
            self._state, self._pos = "text", self._call_from  # never a call: its markup is text
        if self._state == "text":
            # A cut output may end in the start of a call's marker: markup, not text.
            held = held_back(self._raw, self._text_markers, self._pos) if cut else 0
            return self._emit(len(self._raw) - held)
        return []

    def in_reasoning(self) -> bool:
        return self._state == "reasoning"

    def in_call(self) -> bool:
        if self._state in ("call", "between"):
            return True
        return bool(self._call_opening) and held_back(self._raw, self._call_opening, self._pos) > 0
