"""Grammars that constrain sampling: JSON Schema (text.format json_schema) and any JSON object (json_object)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from llama_cpp.llama_grammar import JSON_GBNF, BuiltinRule, SchemaConverter

from app.generation.tool_calls import CALL_CLOSE, CALL_OPEN, FunctionSpec


class InvalidSchema(ValueError):
    """The schema is not valid JSON Schema, or uses what llama.cpp's grammar converter cannot express."""


# Bounds on what llama.cpp is asked to build, measured with bench/grammar_limits.py (docs/reference/limits.md).
# The converter spells a bounded repetition (a string's maxLength, an array's maxItems, a regex's {m,n}) as that
# many nested groups, and llama.cpp parses them recursively: it refuses more than 1,000 levels and overflows its
# stack (killing the process) from about 20,000 in a thread. Each bound sits at half of what llama.cpp accepts.
#: Largest bound one repetition may ask for (maxLength, maxItems, a regex's {m,n}). A lower bound (minLength,
#: minItems) is spelled as copies side by side, not nested: only the sum below bounds it.
MAX_REPETITION = 500
#: Deepest nesting of groups in a grammar (what llama.cpp's parser recurses through; it refuses 1,000+).
MAX_GRAMMAR_NESTING = 600
#: Largest sum of all repetition bounds of one schema: side by side they cost sampling time, not stack.
MAX_TOTAL_REPETITION = 8000
#: Largest grammar, in characters of GBNF.
MAX_GRAMMAR_CHARS = 256_000
#: Longest regex (a custom tool's pattern, a string's `pattern`).
MAX_PATTERN_CHARS = 2000

NESTED_KEYWORDS = ("maxLength", "maxItems", "maxProperties")
SEQUENTIAL_KEYWORDS = ("minLength", "minItems", "minProperties")
_QUANTIFIER = re.compile(r"\{(\d+)(?:,(\d*))?\}")


def _too_large(what: str, bound: int, limit: int) -> InvalidSchema:
    return InvalidSchema(f"{what} of {bound} is more than this server can enforce (at most {limit})")


def _pattern_repetition(pattern: str) -> int:
    """How many atoms a regex expands to when its quantifiers are written out (nested ones multiply): what the
    converter builds from it. A 400 at once for a single bound over MAX_REPETITION."""
    levels: list[int] = [0]
    index = 0
    while index < len(pattern):
        char = pattern[index]
        cost = 0
        if char == "\\":
            index, cost = index + 2, 1
        elif char == "[":
            close = pattern.find("]", index + 2)
            index, cost = (len(pattern) if close < 0 else close + 1), 1
        elif char == "(":
            levels.append(0)
            index += 1
            continue
        elif char == ")" and len(levels) > 1:
            index, cost = index + 1, max(levels.pop(), 1)
        else:
            index, cost = index + 1, 1
        quantifier = _QUANTIFIER.match(pattern, index)
        if quantifier:
            bound = max(int(quantifier.group(1)), int(quantifier.group(2) or 0))
            if bound > MAX_REPETITION:
                raise _too_large("a pattern's repetition bound", bound, MAX_REPETITION)
            cost *= max(bound, 1)
            index = quantifier.end()
        levels[-1] += cost
    return sum(levels)


def check_schema_bounds(schema: Any) -> None:
    """InvalidSchema when `schema` asks for more than llama.cpp's grammar code survives (see the bounds above);
    checked before converting it, which a huge bound would already make slow. Iterative: any depth is safe."""
    total = 0
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        for keyword in (*NESTED_KEYWORDS, *SEQUENTIAL_KEYWORDS):
            bound = node.get(keyword)
            if isinstance(bound, int | float) and not isinstance(bound, bool):
                if keyword in NESTED_KEYWORDS and bound > MAX_REPETITION:
                    raise _too_large(f"'{keyword}'", int(bound), MAX_REPETITION)
                total += int(bound)
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            if len(pattern) > MAX_PATTERN_CHARS:
                raise _too_large("a pattern's length", len(pattern), MAX_PATTERN_CHARS)
            repetition = _pattern_repetition(pattern)
            if repetition > MAX_TOTAL_REPETITION:
                raise _too_large(
                    "a pattern's expansion (its atoms times their repetition bounds)", repetition, MAX_TOTAL_REPETITION
                )
            total += repetition
        if total > MAX_TOTAL_REPETITION:
            raise _too_large(
                "the sum of the schema's lengths, item counts and repetitions", total, MAX_TOTAL_REPETITION
            )
        stack.extend(node.values())


def _nesting(grammar: str) -> int:
    """The deepest nesting of groups in GBNF, outside string literals and character classes."""
    deepest = depth = 0
    quote: str | None = None
    index = 0
    while index < len(grammar):
        char = grammar[index]
        if quote is not None:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = None
        elif char in '"[':
            quote = "]" if char == "[" else char
        elif char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth -= 1
        index += 1
    return deepest


def checked_grammar(grammar: str) -> str:
    """`grammar`, when llama.cpp can build it safely (size and nesting within the bounds); else InvalidSchema."""
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise _too_large("the grammar's size in characters", len(grammar), MAX_GRAMMAR_CHARS)
    nesting = _nesting(grammar)
    if nesting > MAX_GRAMMAR_NESTING:
        raise _too_large("the grammar's nesting", nesting, MAX_GRAMMAR_NESTING)
    return grammar


# Strict JSON strings ---------------------------------------------------------------------------------------
# llama.cpp's converter lets a string hold any character but `"` and `\` raw (its `char` rule), writes a regex's
# characters into the string as they are (a `pattern`'s `\n` becomes a raw newline, its `"` ends the string),
# and does not escape backslashes in the literals of `const`, `enum` and property names: its output need not
# parse. The converter below writes every string as strict JSON (RFC 8259): control characters, `"` and `\`
# only as escapes. The terminals are read as llama.cpp's grammar parser reads them (parse_char).

#: Characters a JSON string holds only as escapes: U+0000-U+001F, `"` and `\`.
JSON_ESCAPED = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
#: A string's character, as strict JSON writes it (llama.cpp's, less the raw control characters).
STRICT_CHAR = r'[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'
_GBNF_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]"}
_GBNF_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}


@dataclass(frozen=True, slots=True)
class CharClass:
    """A GBNF character class: the code point ranges it lists, and whether it admits all but those."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool

    def admits(self, code: int) -> bool:
        return any(low <= code <= high for low, high in self.ranges) != self.negated


def _gbnf_char(text: str, index: int) -> tuple[int, int]:
    """The code point written at `index` of GBNF text (an escape or one character), and the index after it."""
    if text[index] != "\\":
        return ord(text[index]), index + 1
    kind = text[index + 1]
    if kind in _GBNF_HEX_DIGITS:
        end = index + 2 + _GBNF_HEX_DIGITS[kind]
        return int(text[index + 2 : end], 16), end
    if kind not in _GBNF_ESCAPES:
        raise ValueError(f"llama.cpp's grammars have no escape \\{kind}")
    return ord(_GBNF_ESCAPES[kind]), index + 2


def gbnf_terminals(body: str) -> Iterator[tuple[int, int, str | CharClass]]:
    """(start, end, terminal) of each literal (as the text it matches) and character class of a GBNF rule body,
    in order; comments skipped."""
    index = 0
    while index < len(body):
        char = body[index]
        if char == "#":
            newline = body.find("\n", index)
            index = len(body) if newline < 0 else newline
        elif char == '"':
            start, index, text = index, index + 1, []
            while body[index] != '"':
                code, index = _gbnf_char(body, index)
                text.append(chr(code))
            index += 1
            yield start, index, "".join(text)
        elif char == "[":
            start, index = index, index + 1
            negated = body[index] == "^"
            index += negated
            ranges = []
            while body[index] != "]":
                low, index = _gbnf_char(body, index)
                high = low
                if body[index] == "-" and body[index + 1] != "]":
                    high, index = _gbnf_char(body, index + 1)
                ranges.append((low, high))
            index += 1
            yield start, index, CharClass(tuple(ranges), negated)
        else:
            index += 1


def _gbnf_code(code: int) -> str:
    """One code point in a GBNF character class: ASCII letters and digits as they are, anything else escaped."""
    char = chr(code)
    if char.isascii() and char.isalnum():
        return char
    return f"\\x{code:02X}" if code < 0x100 else f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}"


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF literal: printable ASCII as it is (`"` and `\\` escaped), anything else as an escape."""
    escaped = ("\\" + char if char in '"\\' else char if " " <= char <= "~" else _gbnf_code(ord(char)) for char in text)
    return '"' + "".join(escaped) + '"'


def _gbnf_class(ranges: Sequence[tuple[int, int]], negated: bool) -> str:
    listed = "".join(
        _gbnf_code(low) if low == high else f"{_gbnf_code(low)}-{_gbnf_code(high)}" for low, high in ranges
    )
    return f"[{'^' if negated else ''}{listed}]"


def _without_escaped(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """`ranges` less the characters JSON escapes."""
    kept = list(ranges)
    for low_out, high_out in JSON_ESCAPED:
        kept = [
            part
            for low, high in kept
            for part in ((low, min(high, low_out - 1)), (max(low, high_out + 1), high))
            if part[0] <= part[1]
        ]
    return kept


def _json_content(terminal: str | CharClass, written: str) -> str:
    """GBNF matching what `terminal` matches, as a JSON string's content writes it (`written`: the terminal's own
    GBNF, kept where it needs no escape)."""
    if isinstance(terminal, str):
        return gbnf_literal(json.dumps(terminal, ensure_ascii=False)[1:-1])
    escaped = [code for low, high in JSON_ESCAPED for code in range(low, high + 1) if terminal.admits(code)]
    if not escaped and not terminal.negated:
        return written
    if terminal.negated:
        plain = [_gbnf_class([*terminal.ranges, *JSON_ESCAPED], negated=True)]
    else:
        kept = _without_escaped(terminal.ranges)
        plain = [_gbnf_class(kept, negated=False)] if kept else []
    escapes = [gbnf_literal(json.dumps(chr(code))[1:-1]) for code in escaped]
    return "(" + " | ".join([*plain, *escapes]) + ")"


def json_string_content(body: str) -> str:
    """GBNF `body`, whose terminals match a string's characters, rewritten to match them as a JSON string's
    content writes them: control characters, `"` and `\\` as escapes."""
    pieces, done = [], 0
    for start, end, terminal in gbnf_terminals(body):
        pieces += [body[done:start], _json_content(terminal, body[start:end])]
        done = end
    return "".join([*pieces, body[done:]])


class StrictJsonConverter(SchemaConverter):
    """llama.cpp's JSON Schema -> GBNF converter, writing strings as strict JSON (see above). Its methods have no
    annotations: the calls to them are marked for mypy."""

    QUOTED = ('"\\"" ', ' "\\"" space')

    def __init__(self) -> None:
        super().__init__(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)  # type: ignore[no-untyped-call]
        #: The rules a `pattern` made: its string (quoted), and the parts of its regex (unquoted).
        self._pattern_strings: set[str] = set()
        self._pattern_parts: set[str] = set()

    def _format_literal(self, literal: str) -> str:
        # Always JSON text here (json.dumps of a const, an enum value or a property name): its backslashes too
        # must reach the output.
        return gbnf_literal(literal)

    def _add_primitive(self, name: str, rule: BuiltinRule) -> str:
        if name == "char":
            rule = BuiltinRule(STRICT_CHAR, [])
        added: str = super()._add_primitive(name, rule)
        return added

    def _visit_pattern(self, pattern: str, name: str) -> str:
        before = dict(self._rules)
        rule: str = super()._visit_pattern(pattern, name)  # type: ignore[no-untyped-call]
        self._pattern_strings.add(rule)
        self._pattern_parts |= {key for key, body in self._rules.items() if before.get(key) != body} - {rule}
        return rule

    def format_grammar(self) -> str:
        open_quote, close_quote = self.QUOTED
        for key in self._pattern_parts:
            self._rules[key] = json_string_content(self._rules[key])
        for key in self._pattern_strings:
            body = self._rules[key]
            assert body.startswith(open_quote) and body.endswith(close_quote), body
            inner = body[len(open_quote) : -len(close_quote)]
            self._rules[key] = open_quote + json_string_content(inner) + close_quote
        grammar: str = super().format_grammar()  # type: ignore[no-untyped-call]
        return grammar


def strict_json_gbnf(schema: dict[str, Any]) -> str:
    """GBNF for the JSON documents matching `schema`, every string in strict JSON."""
    converter = StrictJsonConverter()
    # A copy: resolving references rewrites the schema's `$ref`s in place.
    converter.visit(converter.resolve_refs(json.loads(json.dumps(schema)), "stdin"), "")  # type: ignore[no-untyped-call]
    grammar: str = converter.format_grammar()
    return grammar


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """GBNF accepting exactly the JSON documents that match `schema` (not yet checked against the bounds: see
    checked_grammar)."""
    check_schema_bounds(schema)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        raise InvalidSchema(f"invalid JSON Schema: {error.message}") from None
    except RecursionError:
        raise InvalidSchema("the JSON Schema is nested too deeply") from None
    try:
        grammar = strict_json_gbnf(schema)
    except (AssertionError, KeyError, ValueError, TypeError, RecursionError) as error:
        raise InvalidSchema(f"this JSON Schema cannot be enforced: {error}") from None
    except IndexError:  # a pattern whose escape or class llama.cpp's converter left open
        raise InvalidSchema("this JSON Schema cannot be enforced: a pattern ends inside an escape") from None
    return grammar


def text_format_grammar(text_format: dict[str, Any] | None) -> str | None:
    """The grammar a `text.format` asks for; None for plain text."""
    kind = (text_format or {}).get("type", "text")
    if kind == "json_object":
        return JSON_GBNF
    if kind == "json_schema":
        return checked_grammar(json_schema_grammar((text_format or {}).get("schema") or {}))
    return None


def _call_schema(function: FunctionSpec) -> dict[str, Any]:
    if function.kind == "custom":
        text: dict[str, Any] = {"type": "string"}
        if function.input_pattern:
            # The whole input must match; llama.cpp's converter wants the pattern anchored.
            pattern = function.input_pattern
            text["pattern"] = pattern if pattern.startswith("^") and pattern.endswith("$") else f"^({pattern})$"
        payload = ("input", text)
    else:
        payload = ("arguments", function.parameters or {"type": "object"})
    return {
        "type": "object",
        "properties": {"name": {"const": function.name}, payload[0]: payload[1]},
        "required": ["name", payload[0]],
        "additionalProperties": False,
    }


def function_grammar(function: FunctionSpec) -> str:
    """The grammar of one call of `function` alone, within the bounds: to find which tool is over them."""
    return checked_grammar(json_schema_grammar(_call_schema(function)))


def tool_call_grammar(functions: Sequence[FunctionSpec]) -> str:
    """GBNF for exactly one `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` of one of `functions`,
    whose arguments match that function's parameters schema."""
    variants = [_call_schema(function) for function in functions]
    schema = variants[0] if len(variants) == 1 else {"anyOf": variants}
    call = checked_grammar(json_schema_grammar(schema))
    # Rename the converter's root and wrap it in the call tags.
    lines = [
        f"call ::= {line[len('root ::= ') :]}" if line.startswith("root ::= ") else line for line in call.splitlines()
    ]
    return "\n".join([f'root ::= "{CALL_OPEN}" call "{CALL_CLOSE}"', *lines])
