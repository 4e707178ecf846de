"""A call written as a name then XML parameters (Qwen3-Coder, MiniMax, GLM, DeepSeek's DSML): each parameter's
value is text, read as its schema's type says, sent on as JSON arguments a parameter at a time."""

from __future__ import annotations

import json
from dataclasses import dataclass

from app.generation.dialects.json_args import skip_space
from app.generation.dialects.readers import Arguments, CallReader, ReadState, known
from app.generation.dialects.segments import CallStart, ParseOptions, Segment


@dataclass(frozen=True, slots=True)
class XmlParameters:
    """`<name_open>NAME<name_close> (<key_open>KEY<key_close><value_open>VALUE<value_close>)* <close>`: each
    parameter's value is text, read as its schema's type says (a string, else JSON), or as the syntax marks it
    (`string="true"`)."""

    name_close: tuple[str, ...]
    key_open: str
    key_close: str
    value_close: str
    close: str
    name_open: str = ""
    value_open: str = ""
    #: What may sit between the key's close and the value (attributes up to `>`), e.g. DSML's ` string="true">`.
    attributes_end: str = ""

    def reader(self, start: int, options: ParseOptions) -> CallReader:
        return XmlCallReader(start, options, self)


class XmlCallReader:
    def __init__(self, start: int, options: ParseOptions, syntax: XmlParameters) -> None:
        self._options = options
        self._syntax = syntax
        self.start = self.end = start
        self._cursor = start
        self.opened = False
        self._name = ""
        self._arguments: Arguments | None = None
        self._count = 0
        self.closed = False

    def read(self, text: str) -> tuple[list[Segment], ReadState]:
        segments: list[Segment] = []
        if not self.opened:
            state = self._read_name(text, segments)
            if state != "more" or not self.opened:
                return segments, state
        while True:
            index = skip_space(text, self._cursor)
            rest = text[index:]
            if rest.startswith(self._syntax.close):
                self._cursor = self.end = index + len(self._syntax.close)
                segments += self._close(complete=True)
                return segments, "done"
            if rest.startswith(self._syntax.key_open):
                parameter = self._read_parameter(text, index + len(self._syntax.key_open))
                if parameter is None:
                    return segments, "more"
                key, value, self._cursor = parameter
                segments += self._add(key, value)
                continue
            if self._syntax.close.startswith(rest) or self._syntax.key_open.startswith(rest):
                return segments, "more"
            # Something else inside the call: it ends here, as far as it got.
            self.end = index
            segments += self._close(complete=False)
            return segments, "done"

    def _read_name(self, text: str, segments: list[Segment]) -> ReadState:
        index = skip_space(text, self._cursor)
        opening = self._syntax.name_open
        if opening:
            if not text.startswith(opening, index):
                return "more" if opening.startswith(text[index:]) else "text"
            index += len(opening)
        ends = [(text.find(marker, index), marker) for marker in self._syntax.name_close]
        found = [(where, marker) for where, marker in ends if where >= 0]
        if not found:
            return "more" if len(text) - index <= 256 else "text"
        where, marker = min(found)
        name = text[index:where].strip()
        if not known(name, self._options):
            return "text"
        self.opened, self._name = True, name
        self._arguments = Arguments(self._options.tools[name])
        segments.append(CallStart(name))
        # A name may end at the first parameter or at the call's close: only its own close marker is eaten.
        self._cursor = where if marker in (self._syntax.key_open, self._syntax.close) else where + len(marker)
        return "more"

    def _read_parameter(self, text: str, index: int) -> tuple[str, object, int] | None:
        syntax = self._syntax
        key_end = text.find(syntax.key_close, index)
        if key_end < 0:
            return None
        key = text[index:key_end].strip()
        value_from = key_end + len(syntax.key_close)
        attributes = ""
        if syntax.attributes_end:
            close = text.find(syntax.attributes_end, value_from)
            if close < 0:
                return None
            attributes, value_from = text[value_from:close], close + len(syntax.attributes_end)
        if syntax.value_open:
            value_from = skip_space(text, value_from)
            if not text.startswith(syntax.value_open, value_from):
                return None if syntax.value_open.startswith(text[value_from:]) else (key, "", value_from)
            value_from += len(syntax.value_open)
        value_end = text.find(syntax.value_close, value_from)
        if value_end < 0:
            return None
        raw = text[value_from:value_end]
        raw = raw[1:] if raw.startswith("\n") else raw
        raw = raw[:-1] if raw.endswith("\n") else raw
        return key, self._typed(key, raw, attributes), value_end + len(syntax.value_close)

    def _typed(self, key: str, raw: str, attributes: str) -> object:
        if 'string="true"' in attributes:
            return raw
        declared = self._options.parameter_types.get(self._name, {}).get(key)
        if declared == "string" or (declared is None and 'string="false"' not in attributes and not raw.strip()):
            return raw
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            return raw

    def _add(self, key: str, value: object) -> list[Segment]:
        assert self._arguments is not None
        member = f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}"
        self._count += 1
        return self._arguments.add(("{" if self._count == 1 else ", ") + member)

    def _close(self, *, complete: bool) -> list[Segment]:
        assert self._arguments is not None
        self.closed = True
        return self._arguments.add("}" if self._count else "{}") + self._arguments.close(complete=complete)

    def cut(self, text: str) -> list[Segment]:
        if not self.opened or self.closed:
            return []
        assert self._arguments is not None
        return self._arguments.close(complete=False)
