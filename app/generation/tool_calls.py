"""Tools as the model sees them (FunctionSpec), and our tool-calling convention for models whose chat template has
none: how tools, calls and results are written into the prompt.

A template that renders tools itself gets them as its `tools` variable instead of our system-prompt section.
Calls are read back out of the model's text in its family's own syntax (app/generation/dialects); ours is the
Hermes/Qwen form (`<tool_call>` and `<tool_response>` tags), the form of the common tool-capable templates.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"


#: What a tool is to the model: a function (JSON arguments), a custom tool (free text), or one of the API's
#: client-executed tool types, which it calls like a function (under the type's name) with fixed arguments.
ToolKind = Literal["function", "custom", "shell", "local_shell", "apply_patch", "tool_search"]
#: The client-executed tool types (their calls become the SDK's item of that type, not a function_call).
CLIENT_TOOL_KINDS: frozenset[str] = frozenset({"shell", "local_shell", "apply_patch", "tool_search"})

_COMMANDS = {"type": "array", "items": {"type": "string"}, "minItems": 1}
#: The arguments each client tool type takes (the fields of its call's `action` or `operation`); tool_search's
#: are its tool's own `parameters`, else TOOL_SEARCH_PARAMETERS.
CLIENT_TOOL_PARAMETERS: dict[str, dict[str, Any]] = {
    "shell": {
        "type": "object",
        "properties": {"commands": _COMMANDS, "timeout_ms": {"type": "integer"}},
        "required": ["commands"],
        "additionalProperties": False,
    },
    "local_shell": {
        "type": "object",
        "properties": {
            "command": _COMMANDS,
            "working_directory": {"type": "string"},
            "timeout_ms": {"type": "integer"},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    "apply_patch": {
        "type": "object",
        "properties": {
            "type": {"enum": ["create_file", "update_file", "delete_file"]},
            "path": {"type": "string", "minLength": 1},
            "diff": {"type": "string"},
        },
        "required": ["type", "path"],
        "additionalProperties": False,
    },
}
TOOL_SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}},
    "required": ["query"],
}
CLIENT_TOOL_DESCRIPTIONS = {
    "shell": "Run shell commands on the user's machine; `commands` run in order.",
    "local_shell": "Run one command (an argv list) on the user's machine.",
    "apply_patch": "Create, update (with a V4A diff) or delete a file on the user's machine.",
    "tool_search": "Search for more tools; those found can be called next.",
}


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """One callable tool as the model sees it; `namespace` for tools grouped in a namespace tool.

    A `custom` tool takes free text (`input`) instead of JSON arguments, matching `input_pattern` if given.
    """

    name: str
    description: str | None
    parameters: dict[str, Any]
    namespace: str | None = None
    kind: ToolKind = "function"
    input_pattern: str | None = None


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str  # function tools: a JSON object, as text; custom tools: the free-text input
    #: False for a call cut off (the token limit, a cancel) in its arguments: `arguments` is what came before.
    complete: bool = True
    #: The call as the model wrote it, and where in its text: said as text where the call cannot be made.
    markup: str = ""
    markup_at: int = 0


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


def parameter_types(functions: Sequence[FunctionSpec]) -> dict[str, dict[str, str]]:
    """Each function's top-level parameters' declared JSON types (a custom tool's one `input`, a string): how a
    syntax that writes arguments as text (XML parameters) reads each value."""
    types: dict[str, dict[str, str]] = {}
    for function in functions:
        if function.kind == "custom":
            types[function.name] = {"input": "string"}
            continue
        properties = function.parameters.get("properties")
        if isinstance(properties, dict):
            types[function.name] = {
                key: schema["type"]
                for key, schema in properties.items()
                if isinstance(schema, dict) and isinstance(schema.get("type"), str)
            }
    return types
