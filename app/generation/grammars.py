"""Grammars that constrain sampling: JSON Schema (text.format json_schema) and any JSON object (json_object)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

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
        grammar: str = json_schema_to_gbnf(json.dumps(schema))
    except (AssertionError, KeyError, ValueError, TypeError, RecursionError) as error:
        raise InvalidSchema(f"this JSON Schema cannot be enforced: {error}") from None
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
