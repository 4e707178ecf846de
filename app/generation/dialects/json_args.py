"""JSON read as it streams: where a value written from some index ends (its text sent as it comes), a call object's
name read before its arguments, and what a cut left of an object or a string."""

from __future__ import annotations

import json
import re
from typing import Any

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
#: What ends a scalar (a number, true...) written at the top: the characters that may follow it.
_SCALAR_ENDS = frozenset(", \t\n\r<[`")
#: The longest escape a cut can split (`\uXXXX`).
_LONGEST_ESCAPE = 6


def skip_space(text: str, index: int) -> int:
    match = _SPACE.match(text, index)
    assert match is not None, "the pattern matches the empty string"
    return match.end()


class JsonValueStream:
    """One JSON value written in a text from `start` on (whitespace before it skipped), read as it grows: each
    `advance` returns the value's text added since the last (never past its end) and whether it ended.

    Scalars (a number, true...) end only where something follows them: a cut or the text's end decides."""

    def __init__(self, start: int) -> None:
        self.start = start
        self._index = start
        self._began = False
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self.ended = False

    def advance(self, text: str) -> tuple[str, bool]:
        if self.ended:
            return "", True
        if not self._began:
            self._index = self.start = skip_space(text, self.start)
            if self._index >= len(text):
                return "", False
            self._began = True
        sent = index = self._index
        while index < len(text) and not self.ended:
            index = self._step(text, index)
        self._index = index
        return text[sent:index], self.ended

    def _step(self, text: str, index: int) -> int:
        """One character read: the index after it (at it, for the character that ends a scalar)."""
        char = text[index]
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == '"':
                self._in_string = False
                self.ended = self._depth == 0
        elif char == '"':
            self._in_string = True
        elif char in "{[":
            self._depth += 1
        elif char in "}]":
            self._depth -= 1
            self.ended = self._depth <= 0
        elif self._depth == 0 and char in _SCALAR_ENDS:
            self.ended = True
            return index
        return index + 1

    @property
    def end(self) -> int:
        return self._index


def json_object(text: str) -> dict[str, Any] | None:
    """`text` as a JSON object, else None."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def members_before_cut(body: str) -> tuple[dict[str, Any], tuple[str, str] | None]:
    """The members of the JSON object that `body` opens and a cut ended: those read whole, and the key and the
    text so far of the member the cut fell in the value of (None when it fell elsewhere)."""
    members: dict[str, Any] = {}
    index = skip_space(body, 0)
    if not body.startswith("{", index):
        return members, None
    index += 1
    while True:
        try:
            key, index = _DECODER.raw_decode(body, skip_space(body, index))
        except json.JSONDecodeError:
            return members, None
        index = skip_space(body, index)
        if not isinstance(key, str) or not body.startswith(":", index):
            return members, None
        index = skip_space(body, index + 1)
        try:
            members[key], index = _DECODER.raw_decode(body, index)
        except json.JSONDecodeError:
            return members, (key, body[index:])
        index = skip_space(body, index)
        if not body.startswith(",", index):
            return members, None
        index += 1


def string_so_far(text: str) -> str:
    """What a JSON string cut off after `text` (its opening quote on) says, less an escape the cut split."""
    for end in range(len(text), max(len(text) - _LONGEST_ESCAPE, 0), -1):
        try:
            value: str = json.loads(text[:end] + '"')
        except json.JSONDecodeError:
            continue
        # Half of a surrogate pair is no text of its own.
        return value[:-1] if value and "\ud800" <= value[-1] <= "\udbff" else value
    return ""


def custom_input(arguments: str, *, complete: bool) -> str | None:
    """A custom tool's free-text input out of the arguments a syntax wrote for it (`{"input": "..."}`, as its
    template was shown it, or a bare JSON string); so far, for a cut call. None: no text there."""
    if complete:
        try:
            value = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            return None
        if isinstance(value, dict):
            value = value.get("input")
        return value if isinstance(value, str) else None
    stripped = arguments.lstrip()
    if stripped.startswith('"'):
        return string_so_far(stripped)
    members, cut = members_before_cut(arguments)
    if isinstance(members.get("input"), str):
        return str(members["input"])
    if cut is not None and cut[0] == "input" and cut[1].startswith('"'):
        return string_so_far(cut[1])
    return ""
