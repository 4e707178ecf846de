"""Our tool-calling convention for models whose chat template has none: how tools, calls and results are
written into the prompt, and how calls are read back out of the model's text.

A template that renders tools itself gets them as its `tools` variable instead of our system-prompt section.
NOTE: calls are read, and earlier calls and results written, in the Hermes/Qwen form (`<tool_call>` and
`<tool_response>` tags) for every model: the form of the common tool-capable templates, not yet of all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """One callable tool as the model sees it; `namespace` for tools grouped in a namespace tool.

    A `custom` tool takes free text (`input`) instead of JSON arguments, matching `input_pattern` if given.
    """

    name: str
    description: str | None
    parameters: dict[str, Any]
    namespace: str | None = None
    kind: Literal["function", "custom"] = "function"
    input_pattern: str | None = None


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str  # function tools: a JSON object, as text; custom tools: the free-text input


def tools_prompt(functions: Sequence[FunctionSpec]) -> str:
    """The system-prompt section that offers the functions and says how to call one."""
    lines = [
        "You can call these tools. To call one, answer with only "
        f'{CALL_OPEN}{{"name": <tool name>, "arguments": <JSON object>}}{CALL_CLOSE}'
        + (
            f', or for a tool that takes text, {CALL_OPEN}{{"name": <tool name>, "input": <text>}}{CALL_CLOSE}'
            if any(function.kind == "custom" for function in functions)
            else ""
        ),
        "Tools:",
    ]
    for function in functions:
        spec: dict[str, Any] = {"name": function.name, "description": function.description or ""}
        if function.kind == "custom":
            spec["input"] = {
                "type": "string",
                **({"pattern": function.input_pattern} if function.input_pattern else {}),
            }
        else:
            spec["parameters"] = function.parameters
        lines.append(json.dumps(spec, sort_keys=True, ensure_ascii=False))
    return "\n".join(lines)


def template_tool(function: FunctionSpec) -> dict[str, Any]:
    """A tool as chat templates take it (the Chat Completions shape)."""
    parameters = function.parameters
    if function.kind == "custom":
        parameters = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
    return {
        "type": "function",
        "function": {"name": function.name, "description": function.description or "", "parameters": parameters},
    }


def render_custom_call(name: str, text: str) -> str:
    return f"{CALL_OPEN}{json.dumps({'name': name, 'input': text}, ensure_ascii=False)}{CALL_CLOSE}"


def render_call(name: str, arguments: str) -> str:
    try:
        parsed: Any = json.loads(arguments)
    except json.JSONDecodeError:
        parsed = arguments
    return f"{CALL_OPEN}{json.dumps({'name': name, 'arguments': parsed}, ensure_ascii=False)}{CALL_CLOSE}"


def render_call_output(output: str) -> str:
    return f"<tool_response>\n{output}\n</tool_response>"


def held_back(text: str, tag: str = CALL_OPEN) -> int:
    """How many trailing characters of `text` could be the start of `tag`, and must wait to be sure."""
    for length in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-length:]):
            return length
    return 0


def parse_calls(text: str, known: Mapping[str, str]) -> list[ParsedCall] | None:
    """The calls in `text` (which starts at the first call tag); None when it is not well-formed calls of
    known tools (name -> "function" | "custom"), in which case the caller keeps it as plain text."""
    calls: list[ParsedCall] = []
    rest = text.strip()
    while rest:
        if not rest.startswith(CALL_OPEN):
            return None
        body, closed, rest = rest[len(CALL_OPEN) :].partition(CALL_CLOSE)
        rest = rest.strip()
        try:
            call = json.loads(body)
        except json.JSONDecodeError:
            return None
        if not closed and rest:
            return None
        if not isinstance(call, dict) or call.get("name") not in known:
            return None
        if known[call["name"]] == "custom":
            text_input = call.get("input", call.get("arguments"))
            if not isinstance(text_input, str):
                return None
            calls.append(ParsedCall(call["name"], text_input))
            continue
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return None
        if not isinstance(arguments, dict):
            return None
        calls.append(ParsedCall(call["name"], json.dumps(arguments, ensure_ascii=False)))
    return calls or None
