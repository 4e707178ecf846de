"""Gemma 4's calls: `<|tool_call>call:NAME{key:value,...}<tool_call|>`, its arguments in Gemma's own notation:
keys bare, strings between `<|"|>` quotes, numbers, booleans, lists and objects as in JSON. Read whole when the
call closes (its notation is not JSON, so its arguments go out as JSON once converted)."""

from __future__ import annotations

import json
import re
from typing import Any

from app.generation.dialects.readers import Arguments, ReadState
from app.generation.dialects.segments import CallStart, ParseOptions, Segment

CALL_OPEN = "<|tool_call>"
CALL_CLOSE = "<tool_call|>"
QUOTE = '<|"|>'
_NAME = re.compile(r"\s*call:([^{\s]+)\s*")
_SCALAR = re.compile(r"[^,}\]\s]+")


class GemmaNotationError(ValueError):
    pass


def _value(text: str, index: int) -> tuple[Any, int]:
    index = len(text) - len(text[index:].lstrip())
    if text.startswith(QUOTE, index):
        close = text.find(QUOTE, index + len(QUOTE))
        if close < 0:
            raise GemmaNotationError("an open string")
        return text[index + len(QUOTE) : close], close + len(QUOTE)
    if text.startswith("{", index):
        return _object(text, index)
    if text.startswith("[", index):
        items: list[Any] = []
        index += 1
        while True:
            index = len(text) - len(text[index:].lstrip())
            if text.startswith("]", index):
                return items, index + 1
            item, index = _value(text, index)
            items.append(item)
            index = len(text) - len(text[index:].lstrip())
            if text.startswith(",", index):
                index += 1
    match = _SCALAR.match(text, index)
    if match is None:
        raise GemmaNotationError(f"no value at {index}")
    word = match.group(0)
    try:
        return json.loads(word), match.end()
    except json.JSONDecodeError:
        return word, match.end()


def _object(text: str, index: int) -> tuple[dict[str, Any], int]:
    members: dict[str, Any] = {}
    index += 1
    while True:
        index = len(text) - len(text[index:].lstrip())
        if index >= len(text):
            raise GemmaNotationError("an open object")
        if text.startswith("}", index):
            return members, index + 1
        colon = text.find(":", index)
        if colon < 0:
            raise GemmaNotationError("a key without a value")
        key = text[index:colon].strip().strip('"')
        if key.startswith(QUOTE):
            key = key.removeprefix(QUOTE).removesuffix(QUOTE)
        members[key], index = _value(text, colon + 1)
        index = len(text) - len(text[index:].lstrip())
        if text.startswith(",", index):
            index += 1


def gemma_arguments(text: str) -> dict[str, Any]:
    """Gemma's `{key:value,...}` as a dict (GemmaNotationError when it does not read)."""
    value, _ = _object(text, text.index("{"))
    return value


def gemma_notation(value: Any) -> str:
    """A value in Gemma's notation (what its template writes and a grammar may force)."""
    if isinstance(value, str):
        return f"{QUOTE}{value}{QUOTE}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{gemma_notation(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(gemma_notation(item) for item in value) + "]"
    return json.dumps(value)


class GemmaCallReader:
    def __init__(self, start: int, options: ParseOptions) -> None:
        self._options = options
        self.start = self.end = start
        self.opened = False
        self._arguments: Arguments | None = None
        self._body_from = start

    def read(self, text: str) -> tuple[list[Segment], ReadState]:
        segments: list[Segment] = []
        if not self.opened:
            match = _NAME.match(text, self.start)
            if match is None or match.end() == len(text):
                waiting = "call:".startswith(text[self.start :].strip()) or (match is not None)
                return [], "more" if waiting and len(text) - self.start < 256 else "text"
            name = match.group(1)
            if name not in self._options.tools:
                return [], "text"
            self.opened, self._body_from = True, match.end()
            self._arguments = Arguments(self._options.tools[name])
            segments.append(CallStart(name))
        close = text.find(CALL_CLOSE, self._body_from)
        if close < 0:
            return segments, "more"
        assert self._arguments is not None
        try:
            arguments = json.dumps(gemma_arguments(text[self._body_from : close]), ensure_ascii=False)
            complete = True
        except (GemmaNotationError, ValueError):
            arguments, complete = "{}", False
        self.end = close + len(CALL_CLOSE)
        return [*segments, *self._arguments.add(arguments), *self._arguments.close(complete=complete)], "done"

    def cut(self, text: str) -> list[Segment]:
        if not self.opened or self.end > self.start:
            return []
        assert self._arguments is not None
        return self._arguments.close(complete=False)
