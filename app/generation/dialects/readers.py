"""Readers of one call (or one list of calls) in the syntaxes families share: a JSON call object, a JSON list of
them, a name then JSON arguments (XML parameters: xml_params.py). A reader starts where its call's opening marker
ended and is handed the growing text; it says when the call is done, or that this was no call after all (text).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from app.generation.dialects.json_args import JsonValueStream, custom_input, json_object, members_before_cut, skip_space
from app.generation.dialects.segments import CallDelta, CallEnd, CallStart, ParseOptions, Segment

#: "more": the call goes on past the text so far; "done": it ended at `end`; "text": it was no call (its
#: markup is text, from the opening marker on).
ReadState = Literal["more", "done", "text"]


class CallReader(Protocol):
    #: Where the text it read ends (after the call, once done).
    end: int
    #: Whether a call was opened (its name read): after that it is never text again.
    opened: bool

    def read(self, text: str) -> tuple[list[Segment], ReadState]: ...

    def cut(self, text: str) -> list[Segment]:
        """The text ended inside the call: it ends as far as it got (nothing when its name was not read)."""
        ...


ReaderFactory = Callable[[int, ParseOptions], CallReader]


class Arguments:
    """One call's arguments on their way out: a function's sent as they come (JSON text); a custom tool's held,
    its input sent whole at the end; arguments written as a JSON string (JSON inside) held and decoded."""

    def __init__(self, kind: str) -> None:
        self.custom = kind == "custom"
        self.held = False
        self.text: list[str] = []
        self._space = ""

    def add(self, text: str) -> list[Segment]:
        # Whitespace waits for what follows it: after the arguments' end it is none of them.
        text = self._space + text
        kept = text.rstrip()
        self._space = text[len(kept) :]
        text = kept
        if not text:
            return []
        if not self.text and not self.custom and text.lstrip().startswith('"'):
            self.held = True
        self.text.append(text)
        return [] if self.custom or self.held else [CallDelta(text)]

    def close(self, *, complete: bool) -> list[Segment]:
        written = "".join(self.text)
        # Whitespace held at a cut is part of what was written (a cut string's content, arguments so far).
        space, self._space = ("" if complete else self._space), ""
        written += space
        if self.custom:
            found = custom_input(written, complete=complete)
            if found is None:
                found, complete = ("" if written.lstrip()[:1] in ("{", '"') else written), complete and bool(written)
            return [*([CallDelta(found)] if found else []), CallEnd(found, complete)]
        if self.held:
            decoded = custom_input(written, complete=complete) or ""
            ok = complete and json_object(decoded) is not None
            return [*([CallDelta(decoded)] if decoded else []), CallEnd(decoded, ok)]
        return [*([CallDelta(space)] if space else []), CallEnd(written, complete and json_object(written) is not None)]


def known(name: str, options: ParseOptions) -> bool:
    return name in options.tools


# A call object: {"name": ..., "arguments": {...}} ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObjectKeys:
    """The keys a family's call object names its tool and its arguments with."""

    name: tuple[str, ...] = ("name",)
    arguments: tuple[str, ...] = ("arguments", "parameters")
    #: A custom tool's text may come under its own key (our convention: "input").
    text: tuple[str, ...] = ("input",)


_NAME_FIRST = re.compile(r'\{\s*"([A-Za-z_]+)"\s*:\s*"')
_NEXT_KEY = re.compile(r'\s*,\s*"([A-Za-z_]+)"\s*:\s*')


def _possible_prefix(text: str, heads: tuple[str, ...]) -> bool:
    """Whether `text`, its whitespace dropped, could still grow into one of `heads` (JSON written compact)."""
    compact = "".join(text.split())
    return any(head.startswith(compact) for head in heads)


class ObjectCallReader:
    """One call object from `start` (whitespace, then `{`). Read name first (the common order): the call opens when
    its name is read, its arguments stream as they come. Any other order waits for the whole object."""

    def __init__(self, start: int, options: ParseOptions, keys: ObjectKeys = ObjectKeys()) -> None:
        self._options = options
        self._keys = keys
        self.start = start
        self.end = start
        self.opened = False
        self._object: JsonValueStream | None = None
        self._step: Literal["head", "name", "key", "value", "tail", "whole"] = "head"
        self._name = ""
        self._value: JsonValueStream | None = None
        self._arguments: Arguments | None = None
        self._cursor = start
        self._steps: dict[str, Callable[[str, list[Segment]], ReadState]] = {
            "head": self._at_head,
            "name": self._at_name,
            "key": self._at_key,
            "value": self._at_value,
            "tail": self._at_tail,
            "whole": self._at_whole,
        }

    def read(self, text: str) -> tuple[list[Segment], ReadState]:
        if self._object is None:
            begin = skip_space(text, self.start)
            if begin >= len(text):
                return [], "more"
            if text[begin] != "{":
                return [], "text"
            self._object = JsonValueStream(begin)
            self._cursor = begin
        self._object.advance(text)
        segments: list[Segment] = []
        state: ReadState = "more"
        while True:
            step = self._step
            state = self._steps[step](text, segments)
            if state != "more" or self._step == step:
                break
        if state == "done":
            self.end = self._object.end
        return segments, state

    def _heads(self) -> tuple[str, ...]:
        return tuple(f'{{"{key}":"' for key in self._keys.name)

    def _at_head(self, text: str, segments: list[Segment]) -> ReadState:
        match = _NAME_FIRST.match(text, self._cursor)
        if match is None or match.group(1) not in self._keys.name:
            if _possible_prefix(text[self._cursor :], self._heads()):
                return "more"
            self._step = "whole"
            return "more"
        self._cursor = match.end() - 1
        self._step = "name"
        return "more"

    def _at_name(self, text: str, segments: list[Segment]) -> ReadState:
        stream = JsonValueStream(self._cursor)
        stream.advance(text)
        if not stream.ended:
            return "more"
        name = json.loads(text[stream.start : stream.end])
        if not known(name, self._options):
            return "text"
        self._name, self.opened, self._cursor = name, True, stream.end
        self._arguments = Arguments(self._options.tools[name])
        segments.append(CallStart(name))
        self._step = "key"
        return "more"

    def _at_key(self, text: str, segments: list[Segment]) -> ReadState:
        assert self._object is not None and self._arguments is not None
        match = _NEXT_KEY.match(text, self._cursor)
        payload = (*self._keys.arguments, *self._keys.text)
        if match is None:
            rest = text[self._cursor :]
            if not rest.strip() or rest.strip() == ",":
                return "more"
            if rest.lstrip().startswith("}"):  # no arguments at all
                segments += self._arguments.add("{}") + self._arguments.close(complete=True)
                self._step = "tail"
                return "done" if self._object.ended else "more"
            if _possible_prefix(rest, tuple(f',"{key}":' for key in payload)):
                return "more"
            self._step = "whole"
            return "more"
        if match.group(1) not in payload:
            self._step = "whole"
            return "more"
        self._value = JsonValueStream(match.end())
        self._step = "value"
        return "more"

    def _at_value(self, text: str, segments: list[Segment]) -> ReadState:
        assert self._value is not None and self._arguments is not None and self._object is not None
        written, ended = self._value.advance(text)
        segments += self._arguments.add(written)
        if not ended:
            return "more"
        segments += self._arguments.close(complete=True)
        self._step = "tail"
        return "done" if self._object.ended else "more"

    def _at_tail(self, text: str, segments: list[Segment]) -> ReadState:
        assert self._object is not None
        return "done" if self._object.ended else "more"

    def _at_whole(self, text: str, segments: list[Segment]) -> ReadState:
        """Members in another order: the call is read when its object ends."""
        assert self._object is not None
        if not self._object.ended:
            return "more"
        found = json_object(text[self._object.start : self._object.end])
        call = self._call_of(found) if found is not None else None
        if call is None:
            return "done" if self.opened else "text"
        name, arguments = call
        if not self.opened:
            self.opened, self._arguments = True, Arguments(self._options.tools[name])
            segments.append(CallStart(name))
        assert self._arguments is not None
        segments += self._arguments.add(arguments) + self._arguments.close(complete=True)
        return "done"

    def _call_of(self, found: dict[str, object]) -> tuple[str, str] | None:
        name = next((found[key] for key in self._keys.name if isinstance(found.get(key), str)), None)
        if not isinstance(name, str) or not known(name, self._options) or (self.opened and name != self._name):
            return None
        for key in (*self._keys.arguments, *self._keys.text):
            if key in found:
                value = found[key]
                return name, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return name, "{}"

    def cut(self, text: str) -> list[Segment]:
        if self._object is None:
            return []
        if self._step == "value" and self._arguments is not None:
            assert self._value is not None
            return self._arguments.close(complete=self._value.ended)
        if self.opened:
            assert self._arguments is not None
            return [] if self._step == "tail" else self._arguments.close(complete=False)
        members, cut_member = members_before_cut(text[self._object.start :])
        name = next((members[key] for key in self._keys.name if isinstance(members.get(key), str)), None)
        if not isinstance(name, str) or not known(name, self._options):
            return []
        arguments = Arguments(self._options.tools[name])
        payload = (*self._keys.arguments, *self._keys.text)
        for key in payload:
            if key in members:
                whole = members[key]
                written = whole if isinstance(whole, str) else json.dumps(whole, ensure_ascii=False)
                return [CallStart(name), *arguments.add(written), *arguments.close(complete=True)]
        so_far = cut_member[1] if cut_member is not None and cut_member[0] in payload else ""
        return [CallStart(name), *arguments.add(so_far), *arguments.close(complete=False)]


class ListCallReader:
    """A JSON list of call objects from `start` (`[{...}, {...}]`): each a call as it is read."""

    def __init__(self, start: int, options: ParseOptions, keys: ObjectKeys = ObjectKeys()) -> None:
        self._options = options
        self._keys = keys
        self.start = self.end = start
        self.opened = False
        self._began = False
        self._current: ObjectCallReader | None = None
        self._skipped: JsonValueStream | None = None

    def read(self, text: str) -> tuple[list[Segment], ReadState]:
        segments: list[Segment] = []
        if not self._began:
            begin = skip_space(text, self.start)
            if begin >= len(text):
                return [], "more"
            if text[begin] != "[":
                return [], "text"
            self._began, self.end = True, begin + 1
        while True:
            if self._skipped is not None:  # an object that is no call, read to its end and left out
                self._skipped.advance(text)
                if not self._skipped.ended:
                    return segments, "more"
                self.end, self._skipped = self._skipped.end, None
            if self._current is not None:
                state = self._read_current(text, segments)
                if state is not None:
                    return segments, state
            index = skip_space(text, self.end)
            if index >= len(text):
                return segments, "more"
            if text[index] == ",":
                self.end = index + 1
            elif text[index] == "]":
                self.end = index + 1
                return segments, "done"
            elif text[index] == "{":
                self._current = ObjectCallReader(index, self._options, self._keys)
            else:
                return segments, "done" if self.opened else "text"

    def _read_current(self, text: str, segments: list[Segment]) -> ReadState | None:
        """The object being read, read on: the list's state when it decides it (None: the list goes on)."""
        assert self._current is not None
        found, state = self._current.read(text)
        segments += found
        self.opened = self.opened or self._current.opened
        if state == "more":
            return "more"
        if state == "text" and not self.opened:
            return "text"
        if state == "done":
            self.end = self._current.end
        else:  # no call of a known tool, in a list that holds calls: left out
            self._skipped = JsonValueStream(self._current.start)
        self._current = None
        return None

    def cut(self, text: str) -> list[Segment]:
        return self._current.cut(text) if self._current is not None else []


# A name, then JSON arguments -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NameThenJson:
    """`NAME<separator>{...}`: what comes between the opening marker and the separator names the tool (less
    `prefix` and what `strip` matches); the arguments are one JSON value after it, then `suffix` if written."""

    separator: str
    prefix: str = ""
    strip: re.Pattern[str] | None = None
    suffix: str = ""
    #: Longest name (with its decorations) to wait for before deciding this is no call.
    longest: int = 256

    def reader(self, start: int, options: ParseOptions) -> CallReader:
        return NameJsonReader(start, options, self)


class NameJsonReader:
    def __init__(self, start: int, options: ParseOptions, syntax: NameThenJson) -> None:
        self._options = options
        self._syntax = syntax
        self.start = self.end = start
        self.opened = False
        self._value: JsonValueStream | None = None
        self._arguments: Arguments | None = None

    def read(self, text: str) -> tuple[list[Segment], ReadState]:
        segments: list[Segment] = []
        if not self.opened:
            separator = text.find(self._syntax.separator, self.start)
            if separator < 0:
                waiting = len(text) - self.start <= self._syntax.longest
                return [], "more" if waiting else "text"
            name = text[self.start : separator].strip()
            name = name.removeprefix(self._syntax.prefix).strip()
            if self._syntax.strip is not None:
                name = self._syntax.strip.sub("", name)
            if not known(name, self._options):
                return [], "text"
            self.opened = True
            self._arguments = Arguments(self._options.tools[name])
            self._value = JsonValueStream(separator + len(self._syntax.separator))
            segments.append(CallStart(name))
        assert self._value is not None and self._arguments is not None
        written, ended = self._value.advance(text)
        segments += self._arguments.add(written)
        if not ended:
            return segments, "more"
        end = skip_space(text, self._value.end)
        suffix = self._syntax.suffix
        if suffix and not text.startswith(suffix, end):
            if suffix.startswith(text[end:]):
                return segments, "more"
            suffix = ""
        self.end = end + len(suffix)
        segments += self._arguments.close(complete=True)
        return segments, "done"

    def cut(self, text: str) -> list[Segment]:
        if not self.opened:
            return []
        assert self._value is not None and self._arguments is not None
        if self.end > self.start:  # done already
            return []
        return self._arguments.close(complete=self._value.ended)
