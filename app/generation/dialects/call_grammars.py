"""Grammars that force one call in a family's own syntax: the text around the call as the family writes it, and
its arguments held to the tool's schema, as JSON (most families), as XML parameters (Qwen3-Coder, MiniMax, GLM,
DeepSeek's DSML) or in Gemma 4's notation. Within the bounds app/generation/grammars.py keeps."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from app.generation.grammars import (
    InvalidSchema,
    StrictJsonConverter,
    check_schema_bounds,
    checked_grammar,
    gbnf_literal,
)
from app.generation.tool_calls import FunctionSpec


def arguments_schema(function: FunctionSpec) -> dict[str, Any]:
    """What a call's arguments are, as the family's template was shown the tool: a custom tool takes one string,
    `input` (matching its pattern, anchored as llama.cpp's converter wants it)."""
    if function.kind != "custom":
        return function.parameters or {"type": "object"}
    text: dict[str, Any] = {"type": "string"}
    if function.input_pattern:
        pattern = function.input_pattern
        text["pattern"] = pattern if pattern.startswith("^") and pattern.endswith("$") else f"^({pattern})$"
    return {"type": "object", "properties": {"input": text}, "required": ["input"], "additionalProperties": False}


def _checked(schema: dict[str, Any]) -> dict[str, Any]:
    check_schema_bounds(schema)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        raise InvalidSchema(f"invalid JSON Schema: {error.message}") from None
    except RecursionError:
        raise InvalidSchema("the JSON Schema is nested too deeply") from None
    copied: dict[str, Any] = json.loads(json.dumps(schema))
    return copied


def _visit(converter: StrictJsonConverter, schema: dict[str, Any], name: str) -> str:
    try:
        resolved = converter.resolve_refs(_checked(schema), "stdin")
        rule: str = converter.visit(resolved, name)  # type: ignore[no-untyped-call]
    except InvalidSchema:
        raise
    except (AssertionError, KeyError, ValueError, TypeError, RecursionError, IndexError) as error:
        raise InvalidSchema(f"this JSON Schema cannot be enforced: {error}") from None
    return rule


def _sequence(*parts: str) -> str:
    return " ".join(part for part in parts if part and part != '""')


def _grammar(alternatives: list[str], converter: StrictJsonConverter) -> str:
    rules: str = converter.format_grammar()
    root = "root ::= " + " | ".join(f"({alternative})" for alternative in alternatives)
    return checked_grammar("\n".join([root, rules]))


#: One call of a function in a syntax: the text before its arguments and after them.
Wrapping = Callable[[FunctionSpec], tuple[str, str]]


def json_call_grammar(functions: Sequence[FunctionSpec], wrap: Wrapping) -> str:
    """Exactly one call of one of `functions`: `wrap(function)`'s text around its arguments, a JSON object
    matching its schema."""
    converter = StrictJsonConverter()
    alternatives = []
    for index, function in enumerate(functions):
        before, after = wrap(function)
        rule = _visit(converter, arguments_schema(function), f"arguments-{index}")
        alternatives.append(_sequence(gbnf_literal(before), rule, gbnf_literal(after)))
    return _grammar(alternatives, converter)


@dataclass(frozen=True, slots=True)
class XmlShape:
    """How a family writes a call's parameters as XML: each `key_open KEY key_close VALUE value_close`."""

    key_open: str
    key_close: str
    value_close: str
    #: Between a key's close and a non-string value (DSML marks each value's type).
    string_mark: str = ""
    other_mark: str = ""


#: A string parameter's value: any text without markup (NOTE: a forced string value cannot hold `<`).
XML_TEXT = "xml-text ::= [^<]*"


def xml_call_grammar(functions: Sequence[FunctionSpec], wrap: Wrapping, shape: XmlShape) -> str:
    """Exactly one call of one of `functions`, its parameters as XML: the required ones in the schema's order,
    each optional one allowed once after them; strings as plain text, other values as JSON."""
    converter = StrictJsonConverter()
    alternatives = []
    for index, function in enumerate(functions):
        schema = _checked(arguments_schema(function))
        properties: dict[str, Any] = schema.get("properties") or {}
        required = [key for key in schema.get("required") or [] if key in properties]
        parts: list[str] = []
        for key, declared in properties.items():
            choices = _raw_choices(declared)
            if choices is not None:
                value = _sequence(gbnf_literal(shape.string_mark), choices)
            elif isinstance(declared, dict) and declared.get("type") == "string":
                value = _sequence(gbnf_literal(shape.string_mark), "xml-text")
            else:
                rule = _visit(converter, declared if isinstance(declared, dict) else {}, f"p{index}-{len(parts)}")
                value = _sequence(gbnf_literal(shape.other_mark), rule)
            parameter = _sequence(
                gbnf_literal(shape.key_open + key + shape.key_close), value, gbnf_literal(shape.value_close)
            )
            parts.append(parameter if key in required else f"({parameter})?")
        before, after = wrap(function)
        alternatives.append(_sequence(gbnf_literal(before), *parts, gbnf_literal(after)))
    converter._rules["xml-text"] = "[^<]*"
    return _grammar(alternatives, converter)


def _raw_choices(schema: Any) -> str | None:
    """A string enum's values as alternatives of raw text (for a syntax that writes strings unquoted); None for
    anything else."""
    choices = schema.get("enum") if isinstance(schema, dict) else None
    if not isinstance(choices, list) or not choices or not all(isinstance(choice, str) for choice in choices):
        return None
    return "(" + " | ".join(gbnf_literal(choice) for choice in choices) + ")"


def _gemma_value(schema: Any) -> str:
    kind = schema.get("type") if isinstance(schema, dict) else None
    choices = _raw_choices(schema)
    if choices is not None:
        return f"gemma-quote {choices} gemma-quote"
    if kind == "string":
        return "gemma-quote [^<]* gemma-quote"
    if kind == "integer":
        return '"-"? [0-9]{1,16}'  # as llama.cpp's converter bounds a JSON integer
    if kind == "number":
        return '"-"? [0-9]+ ("." [0-9]+)?'
    if kind == "boolean":
        return '("true" | "false")'
    return "gemma-value"


#: Gemma 4's notation, loosely: any value (the schema's top-level types are held, not deeper ones).
GEMMA_RULES = "\n".join(
    [
        r'gemma-quote ::= "<|\"|>"',
        r'gemma-value ::= gemma-quote [^<]* gemma-quote | "-"? [0-9]+ ("." [0-9]+)? | "true" | "false" | "null" | '
        r'"{" (gemma-member ("," gemma-member)*)? "}" | "[" (gemma-value ("," gemma-value)*)? "]"',
        r'gemma-member ::= [A-Za-z_] [A-Za-z0-9_]* ":" gemma-value',
    ]
)


def gemma_call_grammar(functions: Sequence[FunctionSpec], wrap: Wrapping) -> str:
    """Exactly one call in Gemma 4's notation: the required parameters in order, then the optional ones."""
    alternatives = []
    for function in functions:
        schema = _checked(arguments_schema(function))
        properties: dict[str, Any] = schema.get("properties") or {}
        required = [key for key in schema.get("required") or [] if key in properties]
        members = [f'"{key}:" {_gemma_value(properties[key])}' for key in required]
        optional = [
            f'("," "{key}:" {_gemma_value(value)})?' for key, value in properties.items() if key not in required
        ]
        if not members and optional:
            optional[0] = optional[0].replace('("," ', "(", 1)
        body = ' "," '.join(members)
        before, after = wrap(function)
        alternatives.append(_sequence(gbnf_literal(before + "{"), body, *optional, gbnf_literal("}" + after)))
    root = "root ::= " + " | ".join(f"({alternative})" for alternative in alternatives)
    return checked_grammar("\n".join([root, GEMMA_RULES]))
