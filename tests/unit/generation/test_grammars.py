"""The grammars of structured output and forced calls: every string in them written as strict JSON writes it
(no raw control character, `"` or backslash), whatever the schema."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from llama_cpp.llama_grammar import JSON_GBNF

from app.generation.grammars import (
    CharClass,
    gbnf_terminals,
    json_schema_grammar,
    text_format_grammar,
    tool_call_grammar,
)
from app.generation.tool_calls import FunctionSpec

#: Whitespace between JSON tokens, never inside a string: llama.cpp's converter's `space`, JSON_GBNF's `ws`.
WHITESPACE_RULES = {"space", "ws"}
RULE_START = re.compile(r"^([A-Za-z0-9_-]+)\s*::=", re.MULTILINE)

SCHEMAS: dict[str, dict[str, Any]] = {
    "a string": {"type": "string"},
    "a bounded string": {"type": "string", "minLength": 1, "maxLength": 6},
    "nested objects, arrays, enums and numbers": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "place": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "size": {"enum": ["small", "large"]}},
                "required": ["name"],
            },
            "population": {"type": "integer"},
            "area": {"type": "number"},
            "open": {"type": "boolean"},
        },
        "required": ["city", "tags", "place"],
        "additionalProperties": False,
    },
    "any object": {"type": "object"},
    "a pattern with a dot, a newline and a negated class": {"type": "string", "pattern": "^a.b\\n[^x]+$"},
    "a pattern whose class holds control characters, a quote and a backslash": {
        "type": "string",
        "pattern": '^[\\x00-\\x7F"\\\\]{1,3}$',
    },
    "names and enum values that need escapes": {
        "type": "object",
        "properties": {'a"b\\c\nd': {"enum": ["x\ny", "tab\t", 'q"', "back\\slash"]}, "k": {"const": "c\r"}},
        "required": ['a"b\\c\nd', "k"],
    },
    "a reference": {
        "$defs": {"item": {"type": "object", "properties": {"label": {"type": "string"}}}},
        "type": "array",
        "items": {"$ref": "#/$defs/item"},
    },
}
FUNCTION = FunctionSpec("get_weather", None, SCHEMAS["nested objects, arrays, enums and numbers"])
CUSTOM = FunctionSpec("run_sql", None, {}, kind="custom", input_pattern="SELECT .+\\n?")


def rules(grammar: str) -> dict[str, str]:
    """Each rule's body by its name (a rule may span lines)."""
    starts = list(RULE_START.finditer(grammar))
    ends = [match.start() for match in starts[1:]] + [len(grammar)]
    return {match.group(1): grammar[match.end() : end] for match, end in zip(starts, ends, strict=True)}


def raw_control_characters(grammar: str) -> list[str]:
    """Each terminal of a rule outside the whitespace rules that admits a character U+0000-U+001F."""
    found = []
    for name, body in rules(grammar).items():
        if name in WHITESPACE_RULES:
            continue
        for start, end, terminal in gbnf_terminals(body):
            if isinstance(terminal, CharClass):
                admits = any(terminal.admits(code) for code in range(0x20))
            else:
                admits = any(ord(char) < 0x20 for char in terminal)
            if admits:
                found.append(f"{name}: {body[start:end]}")
    return found


def literals(grammar: str, rule: str) -> list[str]:
    return [terminal for _, _, terminal in gbnf_terminals(rules(grammar)[rule]) if isinstance(terminal, str)]


def test_terminals_read_as_llama_cpp_reads_them() -> None:
    body = r'"a\"b\\\n\x41\u00e9" [^\x00-\x1F"\\\]] [a-c-] # a comment "\n" [x]' + '\n"z"'
    assert [terminal for _, _, terminal in gbnf_terminals(body)] == [
        'a"b\\\nAé',
        CharClass(((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x5D, 0x5D)), negated=True),
        CharClass(((0x61, 0x63), (0x2D, 0x2D)), negated=False),
        "z",
    ]


@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS.keys())
def test_no_string_in_a_schema_grammar_admits_a_raw_control_character(schema: dict[str, Any]) -> None:
    assert raw_control_characters(json_schema_grammar(schema)) == []


def test_nor_in_a_forced_call_or_any_json_object() -> None:
    assert raw_control_characters(tool_call_grammar([FUNCTION, CUSTOM])) == []
    assert raw_control_characters(tool_call_grammar([CUSTOM])) == []
    grammar = text_format_grammar({"type": "json_object"})
    assert grammar == JSON_GBNF and raw_control_characters(grammar) == []


def test_literals_are_the_json_of_their_values() -> None:
    schema = SCHEMAS["names and enum values that need escapes"]
    grammar = json_schema_grammar(schema)
    values = schema["properties"]['a"b\\c\nd']["enum"]
    assert sorted(literals(grammar, "a-b-c-d")) == sorted(json.dumps(value) for value in values)
    assert literals(grammar, "a-b-c-d-kv") == [json.dumps('a"b\\c\nd'), ":"]
    assert literals(grammar, "k") == [json.dumps("c\r")]


def test_a_pattern_matches_its_strings_as_json_writes_them() -> None:
    grammar = json_schema_grammar({"type": "string", "pattern": '^a"b\\\\c\\n$'})
    # The regex matches the text a"b\c and a newline: in JSON, four escapes.
    assert "".join(literals(grammar, "root")) == json.dumps('a"b\\c\n')
