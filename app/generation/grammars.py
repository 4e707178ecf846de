"""Grammars that constrain sampling: JSON Schema (text.format json_schema) and any JSON object (json_object)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

from app.generation.tool_calls import CALL_CLOSE, CALL_OPEN, FunctionSpec


class InvalidSchema(ValueError):
    """The schema is not valid JSON Schema, or uses what llama.cpp's grammar converter cannot express."""


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """GBNF accepting exactly the JSON documents that match `schema`."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        raise InvalidSchema(f"invalid JSON Schema: {error.message}") from None
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
        return json_schema_grammar((text_format or {}).get("schema") or {})
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


def tool_call_grammar(functions: Sequence[FunctionSpec]) -> str:
    """GBNF for exactly one `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` of one of `functions`,
    whose arguments match that function's parameters schema."""
    variants = [_call_schema(function) for function in functions]
    schema = variants[0] if len(variants) == 1 else {"anyOf": variants}
    call = json_schema_grammar(schema)
    # Rename the converter's root and wrap it in the call tags.
    lines = [
        f"call ::= {line[len('root ::= ') :]}" if line.startswith("root ::= ") else line for line in call.splitlines()
    ]
    return "\n".join([f'root ::= "{CALL_OPEN}" call "{CALL_CLOSE}"', *lines])
