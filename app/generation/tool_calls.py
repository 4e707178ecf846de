"""Our tool-calling convention for models whose chat template has none: how tools, calls and results are
written into the prompt, and how calls are read back out of the model's text.

A template that renders tools itself gets them as its `tools` variable instead of our system-prompt section.
NOTE: calls are read, and earlier calls and results written, in the Hermes/Qwen form (`<tool_call>` and
`<tool_response>` tags) for every model: the form of the common tool-capable templates, not yet of all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jsonschema import Draft202012Validator

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
_DECODER = json.JSONDecoder()
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
#: The longest escape a cut can split (`\uXXXX`).
_LONGEST_ESCAPE = 6


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


def _read_call(call: Any, known: Mapping[str, str]) -> ParsedCall | None:
    """The call a decoded call object stands for; None when it is not a call of a known tool."""
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or call["name"] not in known:
        return None
    if known[call["name"]] == "custom":
        text_input = call.get("input", call.get("arguments"))
        return ParsedCall(call["name"], text_input) if isinstance(text_input, str) else None
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    fixed = CLIENT_TOOL_PARAMETERS.get(known[call["name"]])
    if fixed is not None and not Draft202012Validator(fixed).is_valid(arguments):
        return None  # not a call the client could run: kept as text
    return ParsedCall(call["name"], json.dumps(arguments, ensure_ascii=False))


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
            call = _read_call(json.loads(body), known)
        except json.JSONDecodeError:
            return None
        if call is None or (not closed and rest):
            return None
        calls.append(call)
    return calls or None


def _skip_space(text: str, index: int) -> int:
    match = _JSON_SPACE.match(text, index)
    assert match is not None, "the pattern matches the empty string"
    return match.end()


def _members_before_cut(body: str) -> tuple[dict[str, Any], tuple[str, str] | None]:
    """The members of the JSON object that `body` opens and a cut ended: those read whole, and the key and the
    text so far of the member the cut fell in the value of (None when it fell elsewhere)."""
    members: dict[str, Any] = {}
    index = _skip_space(body, 0)
    if not body.startswith("{", index):
        return members, None
    index += 1
    while True:
        try:
            key, index = _DECODER.raw_decode(body, _skip_space(body, index))
        except json.JSONDecodeError:
            return members, None
        index = _skip_space(body, index)
        if not isinstance(key, str) or not body.startswith(":", index):
            return members, None
        index = _skip_space(body, index + 1)
        try:
            members[key], index = _DECODER.raw_decode(body, index)
        except json.JSONDecodeError:
            return members, (key, body[index:])
        index = _skip_space(body, index)
        if not body.startswith(",", index):
            return members, None
        index += 1


def _string_so_far(text: str) -> str:
    """What a JSON string cut off after `text` (its opening quote on) says, less an escape the cut split."""
    for end in range(len(text), max(len(text) - _LONGEST_ESCAPE, 0), -1):
        try:
            value: str = json.loads(text[:end] + '"')
        except json.JSONDecodeError:
            continue
        # Half of a surrogate pair is no text of its own.
        return value[:-1] if value and "\ud800" <= value[-1] <= "\udbff" else value
    return ""


def _cut_call(body: str, known: Mapping[str, str]) -> ParsedCall | None:
    """The call that `body` (after its call tag) began before a cut: whole when its arguments are (only its
    closing was cut), else with the arguments so far; None before its name was read whole."""
    try:
        whole, _ = _DECODER.raw_decode(body, _skip_space(body, 0))
    except json.JSONDecodeError:
        whole = None
    if whole is not None:  # the call object ended: only the closing tag was cut
        return _read_call(whole, known)
    members, cut_member = _members_before_cut(body)
    name = members.get("name")
    if not isinstance(name, str) or name not in known:
        return None
    payload_keys = ("input", "arguments") if known[name] == "custom" else ("arguments",)
    for key in payload_keys:
        if key in members:
            return _read_call({"name": name, key: members[key]}, known)
    if cut_member is None or cut_member[0] not in payload_keys:
        return ParsedCall(name, "", complete=False)
    so_far = cut_member[1]
    if known[name] == "custom" or so_far.startswith('"'):  # free text, or arguments written as a JSON string
        so_far = _string_so_far(so_far)
    return ParsedCall(name, so_far, complete=False)


def parse_cut_calls(text: str, known: Mapping[str, str]) -> list[ParsedCall]:
    """The calls in `text` (which starts at the first call tag) that a cut ended (the token limit, a cancel):
    each whole call, then the one the cut fell in, once its name was read (see _cut_call).

    NOTE: what cannot be read as a call of a known tool is left out, where parse_calls would keep it as text:
    the client never sees our call markup, and a cut call is not one the model chose to write as text.
    """
    calls: list[ParsedCall] = []
    rest = text.lstrip()
    while rest.startswith(CALL_OPEN):
        body, closed, rest = rest[len(CALL_OPEN) :].partition(CALL_CLOSE)
        rest = rest.lstrip()
        if not closed:
            cut = _cut_call(body, known)
            return [*calls, cut] if cut is not None else calls
        try:
            call = _read_call(json.loads(body), known)
        except json.JSONDecodeError:
            call = None
        if call is None:
            break
        calls.append(call)
    return calls
