"""Responses items -> chat messages: the one place where a conversation becomes what the model reads.

Two forms, chosen per chat template (its capabilities, app/generation/chat/capabilities.py): for a template that
renders calls (`tool_calls`) and their results (`tool` messages), the structured messages llama-server's `--jinja`
takes (calls with their ids and arguments, results with the call's id and name, reasoning as
`reasoning_content`); for one that renders no calls (SmolLM2's), our convention (app/generation/tool_calls.py):
calls as `<tool_call>` text in assistant turns and results as `<tool_response>` text in user turns."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from app.generation.tool_calls import FunctionSpec, render_call, render_call_output, render_custom_call, tools_prompt

# NOTE: chat templates of small open models rarely know the `developer` role; it is a system message to them.
TEMPLATE_ROLE = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
#: A compaction item as the model reads it: the services open its sealed content into `{type, id, summary}`.
COMPACTION_SUMMARY = "compaction_summary"
SUMMARY_HEADING = "Summary of the conversation so far:"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call in an assistant message: its id (the item's call_id), the function's name, its arguments as JSON."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    #: A `tool` message: the id and the name of the call it answers.
    tool_call_id: str | None = None
    name: str | None = None
    #: An assistant message's reasoning (`reasoning_content`), for the templates that render it.
    reasoning: str | None = None

    def as_template_dict(self) -> dict[str, Any]:
        """The message as llama.cpp hands it to a template (common_chat_msg::to_json_oaicompat: its keys, in its
        order, those with nothing in them left out)."""
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.name:
            message["name"] = self.name
        if self.tool_call_id:
            message["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            message["tool_calls"] = [
                {"type": "function", "function": {"name": call.name, "arguments": call.arguments}, "id": call.id}
                for call in self.tool_calls
            ]
        return message

    @property
    def text(self) -> str:
        """All the text the model reads of it (its size, for the bounds on a prompt's work)."""
        calls = "".join(call.name + call.arguments for call in self.tool_calls)
        return f"{self.reasoning or ''}{self.content}{calls}"


def item_text(item: dict[str, Any]) -> str:
    """The text of a stored message item (see schemas.items.MessageItem), parts joined in order."""
    parts = item.get("content", [])
    if isinstance(parts, str):
        return parts
    return "".join(str(part.get("text", part.get("refusal", ""))) for part in parts)


def item_to_message(item: dict[str, Any]) -> ChatMessage:
    kind = item.get("type", "message")
    if kind == COMPACTION_SUMMARY:
        # NOTE: a user turn, as agents hand a summary on to the next model; `system` mid-conversation breaks
        # many templates.
        return ChatMessage("user", f"{SUMMARY_HEADING}\n{item['summary']}")
    if kind == "function_call":
        return ChatMessage("assistant", render_call(item["name"], item["arguments"]))
    if kind == "custom_tool_call":
        return ChatMessage("assistant", render_custom_call(item["name"], item["input"]))
    if kind in CLIENT_TOOL_CALLS:
        return ChatMessage(
            "assistant", render_call(kind.removesuffix("_call"), json.dumps(client_call_arguments(item)))
        )
    if kind in CLIENT_TOOL_OUTPUTS:
        return ChatMessage("user", render_call_output(client_call_output(item)))
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = item["output"] if isinstance(item["output"], str) else item_text({"content": item["output"]})
        # NOTE: a user turn, not a `tool` role: many small models' templates know no such role.
        return ChatMessage("user", render_call_output(output))
    return ChatMessage(role=TEMPLATE_ROLE[item["role"]], content=item_text(item))


#: Items no turn renders: an MCP listing (its tools are in the system prompt), a configuration change, and a
#: finished hosted search (NOTE: the answer after it, citations and all, carries what the model drew from it; the
#: search itself was the server's, and a later turn sees it no more than hosted's models see past searches).
SILENT_ITEMS = frozenset({"mcp_list_tools", "configuration_update", "file_search_call", "web_search_call"})
#: The calls of client-executed tool types (the model called each as a function named after its type, with
#: CLIENT_TOOL_PARAMETERS' arguments) and their outputs.
CLIENT_TOOL_CALLS = frozenset({"shell_call", "local_shell_call", "apply_patch_call", "tool_search_call"})
CLIENT_TOOL_OUTPUTS = frozenset(
    {"shell_call_output", "local_shell_call_output", "apply_patch_call_output", "tool_search_output"}
)


def client_call_arguments(item: dict[str, Any]) -> dict[str, Any]:
    """A client tool call's arguments as the model wrote them (the inverse of events.call_items)."""
    kind = item["type"]
    if kind == "shell_call":
        action = item["action"]
        return {
            "commands": action["commands"],
            **({"timeout_ms": action["timeout_ms"]} if action.get("timeout_ms") else {}),
        }
    if kind == "local_shell_call":
        action = item["action"]
        optional = {key: action[key] for key in ("working_directory", "timeout_ms") if action.get(key)}
        return {"command": action["command"], **optional}
    if kind == "apply_patch_call":
        return {key: value for key, value in item["operation"].items() if value is not None}
    arguments = item.get("arguments")
    return arguments if isinstance(arguments, dict) else {}


def client_call_output(item: dict[str, Any]) -> str:
    """What a client tool's output item tells the model."""
    kind = item["type"]
    if kind == "shell_call_output":
        lines = []
        for entry in item["output"]:
            outcome = entry["outcome"]
            ending = "(timed out)" if outcome["type"] == "timeout" else f"(exit code {outcome.get('exit_code') or 0})"
            printed = (entry["stdout"].rstrip("\n"), entry["stderr"].rstrip("\n"), ending)
            lines.append("\n".join(part for part in printed if part))
        return "\n".join(lines)
    if kind == "apply_patch_call_output":
        return str(item.get("output") or ("Done." if item["status"] == "completed" else "Failed."))
    if kind == "tool_search_output":
        return json.dumps(item["tools"], ensure_ascii=False)
    return str(item["output"])


@dataclass(frozen=True, slots=True)
class Turn:
    """One earlier response of a chain: the input items it was given and the output it produced."""

    input_items: Sequence[dict[str, Any]]
    output_items: Sequence[dict[str, Any]]


def build_context(
    *,
    instructions: str | None,
    history: Iterable[Turn],
    new_items: Sequence[dict[str, Any]],
    functions: Sequence[FunctionSpec] = (),
    reasoning_tags: tuple[str, str] | None = None,
    structured: bool = False,
) -> tuple[ChatMessage | None, list[ChatMessage]]:
    """The system message of this request (instructions and tools are never inherited) and the conversation.

    The conversation is every turn's input then its output, oldest first, then this request's own items:
    structured messages when `structured` (the template renders calls itself), else our convention's.
    """
    system_parts = [part for part in (instructions, tools_prompt(functions) if functions else None) if part]
    system = ChatMessage("system", "\n\n".join(system_parts)) if system_parts else None
    items = [item for turn in history for item in (*turn.input_items, *turn.output_items)] + list(new_items)
    if structured:
        return system, structured_messages(apply_compaction(items))
    return system, _messages(apply_compaction(items), reasoning_tags)


@dataclass(frozen=True, slots=True)
class PromptContext:
    """What a prompt was rendered from, for a tool round to render again with the round's items after it: the
    system message, the conversation, the template's options, the form of the messages (structured or our
    convention's) and whether the oldest messages may go (truncation "auto"). Plain JSON in a job's payload."""

    system: ChatMessage | None
    messages: tuple[ChatMessage, ...]
    template_options: dict[str, Any] | None = None
    structured: bool = False
    reasoning_tags: tuple[str, str] | None = None
    truncate: bool = False

    def with_items(self, items: Sequence[dict[str, Any]]) -> list[ChatMessage]:
        """The conversation with `items` (output items of the response so far) after it."""
        _, added = build_context(
            instructions=None,
            history=(),
            new_items=items,
            reasoning_tags=self.reasoning_tags,
            structured=self.structured,
        )
        return [*self.messages, *added]

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> PromptContext:
        tags = payload.get("reasoning_tags")
        return cls(
            system=_message(payload["system"]) if payload.get("system") else None,
            messages=tuple(_message(message) for message in payload["messages"]),
            template_options=payload.get("template_options"),
            structured=bool(payload.get("structured")),
            reasoning_tags=(tags[0], tags[1]) if tags else None,
            truncate=bool(payload.get("truncate")),
        )


def _message(payload: dict[str, Any]) -> ChatMessage:
    calls = tuple(ToolCall(**call) for call in payload.get("tool_calls") or ())
    return ChatMessage(**{**payload, "tool_calls": calls})


def is_user_message(item: dict[str, Any]) -> bool:
    return item.get("type", "message") == "message" and item.get("role") == "user"


def apply_compaction(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The latest compaction summary stands for everything before it but the user messages, which stay as
    they were (what /v1/responses/compact returns: the user messages, then the compaction item)."""
    last = max((index for index, item in enumerate(items) if item.get("type") == COMPACTION_SUMMARY), default=None)
    if last is None:
        return list(items)
    return [*(item for item in items[:last] if is_user_message(item)), *items[last:]]


def _messages(items: Sequence[dict[str, Any]], reasoning_tags: tuple[str, str] | None) -> list[ChatMessage]:
    """Items -> chat messages; a reasoning item goes, between its tags, before the assistant turn it led to."""
    messages: list[ChatMessage] = []
    reasoning = ""
    approval_requests: dict[str, dict[str, Any]] = {}
    for item in items:
        if item.get("type") == "mcp_approval_request":
            approval_requests[item["id"]] = item
            continue  # an approved call is its mcp_call; a denied one is told where it was denied
        if item.get("type") == "mcp_approval_response":
            request = approval_requests.get(item["approval_request_id"])
            if request is not None and not item["approve"]:
                messages.append(
                    ChatMessage("assistant", reasoning + render_call(request["name"], request["arguments"]))
                )
                reasoning = ""
                messages.append(ChatMessage("user", render_call_output(denial(item.get("reason")))))
            continue
        if item.get("type") in SILENT_ITEMS:
            continue  # what a server offers is in the system prompt; a configuration change is no message
        if item.get("type") == "mcp_call":
            # The call as the model wrote it, then its result as a tool result (an error, said as one).
            messages.append(ChatMessage("assistant", reasoning + render_call(item["name"], item["arguments"])))
            reasoning = ""
            result = item.get("output")
            if result is None:
                error = item.get("error") or {}
                result = "Error: " + str(error.get("message") or error.get("content") or "the call failed")
            messages.append(ChatMessage("user", render_call_output(result)))
            continue
        if item.get("type") == "reasoning":
            if reasoning_tags is not None:
                reasoning += f"{reasoning_tags[0]}{reasoning_text(item)}{reasoning_tags[1]}\n"
            continue
        message = item_to_message(item)
        if reasoning and message.role == "assistant":
            message = ChatMessage("assistant", reasoning + message.content)
        elif reasoning:
            messages.append(ChatMessage("assistant", reasoning.rstrip("\n")))
        reasoning = ""
        messages.append(message)
    if reasoning:
        messages.append(ChatMessage("assistant", reasoning.rstrip("\n")))
    return messages


class _AssistantTurn:
    """The assistant message being gathered from consecutive output items (reasoning, text, calls), and the
    results of the MCP calls in it, which follow it once it is whole (parallel calls, then their results)."""

    def __init__(self) -> None:
        self.reasoning: list[str] = []
        self.content = ""
        self.calls: list[ToolCall] = []
        self.results: list[ChatMessage] = []

    def flush(self, into: list[ChatMessage]) -> None:
        if self.reasoning or self.content or self.calls:
            reasoning = "\n".join(self.reasoning) or None
            into.append(ChatMessage("assistant", self.content, tuple(self.calls), reasoning=reasoning))
        into += self.results
        self.reasoning, self.content, self.calls, self.results = [], "", [], []

    def call(self, call_id: str, name: str, arguments: str, result: str | None = None) -> None:
        """A call of the turn (with its result, for a call made within the response: an MCP call)."""
        self.calls.append(ToolCall(call_id, name, arguments))
        if result is not None:
            self.results.append(ChatMessage("tool", result, tool_call_id=call_id, name=name))


def _structured_call(item: dict[str, Any]) -> ToolCall | None:
    """A call a client runs, as the template's `tool_calls` entry (None: not such a call)."""
    kind = item.get("type")
    if kind == "function_call":
        return ToolCall(item["call_id"], item["name"], item["arguments"])
    if kind == "custom_tool_call":
        # Offered to the template as a function of one `input` (tool_calls.template_tool).
        return ToolCall(item["call_id"], item["name"], json.dumps({"input": item["input"]}, ensure_ascii=False))
    if kind in CLIENT_TOOL_CALLS:
        arguments = json.dumps(client_call_arguments(item), ensure_ascii=False)
        return ToolCall(item["call_id"], kind.removesuffix("_call"), arguments)
    return None


def _output_text(item: dict[str, Any]) -> str | None:
    """A client's call output as the model reads it (None: not an output)."""
    kind = item.get("type")
    if kind in CLIENT_TOOL_OUTPUTS:
        return client_call_output(item)
    if kind in ("function_call_output", "custom_tool_call_output"):
        return item["output"] if isinstance(item["output"], str) else item_text({"content": item["output"]})
    return None


def _mcp_result(item: dict[str, Any]) -> str:
    result = item.get("output")
    if result is None:
        error = item.get("error") or {}
        result = "Error: " + str(error.get("message") or error.get("content") or "the call failed")
    return str(result)


def structured_messages(items: Sequence[dict[str, Any]]) -> list[ChatMessage]:
    """Items -> the messages a template that renders calls takes, as a Chat Completions client sends them to
    llama-server: consecutive reasoning, text and calls of the model become one assistant message (its
    `reasoning_content`, `content` and `tool_calls`), each result a `tool` message with its call's id and name."""
    messages: list[ChatMessage] = []
    turn = _AssistantTurn()
    names: dict[str, str] = {}
    approval_requests: dict[str, dict[str, Any]] = {}
    for item in items:
        kind = item.get("type", "message")
        call = _structured_call(item)
        output = _output_text(item)
        if kind in SILENT_ITEMS:
            continue
        if kind == "mcp_approval_request":
            approval_requests[item["id"]] = item
        elif kind == "mcp_approval_response":
            request = approval_requests.get(item["approval_request_id"])
            if request is not None and not item["approve"]:
                turn.call(request["id"], request["name"], request["arguments"], denial(item.get("reason")))
        elif kind == "mcp_call":
            turn.call(item["id"], item["name"], item["arguments"], _mcp_result(item))
        elif call is not None:
            names[call.id] = call.name
            turn.calls.append(call)
        elif kind == "reasoning":
            if turn.content or turn.calls:
                turn.flush(messages)
            turn.reasoning.append(reasoning_text(item))
        elif kind == "message" and item.get("role") == "assistant":
            if turn.content or turn.calls:
                turn.flush(messages)
            turn.content = item_text(item)
        else:
            turn.flush(messages)
            if output is not None:
                call_id = item["call_id"]
                messages.append(ChatMessage("tool", output, tool_call_id=call_id, name=names.get(call_id)))
            elif kind == COMPACTION_SUMMARY:
                messages.append(ChatMessage("user", f"{SUMMARY_HEADING}\n{item['summary']}"))
            else:
                messages.append(ChatMessage(item["role"], item_text(item)))
    turn.flush(messages)
    return messages


def denial(reason: str | None) -> str:
    """What the model reads as the result of a call the client did not approve."""
    return "The user did not approve this call; it was not made." + (f" Reason: {reason}" if reason else "")


def encode_reasoning(text: str) -> str:
    """A reasoning item's `encrypted_content`. NOTE: base64, not encrypted: the text for a stateless client to
    send back (reasoning_text reads it)."""
    return base64.b64encode(text.encode()).decode()


def reasoning_text(item: dict[str, Any]) -> str:
    """A reasoning item's text: its content, else what a stateless client sent back as encrypted_content."""
    content = item.get("content") or []
    if content:
        return "".join(str(part.get("text", "")) for part in content)
    encoded = item.get("encrypted_content")
    if encoded:
        try:
            return base64.b64decode(encoded).decode()
        except (ValueError, UnicodeDecodeError):
            return ""
    return "".join(str(part.get("text", "")) for part in item.get("summary") or [])


def call_ids(history: Iterable[Turn], new_items: Sequence[dict[str, Any]]) -> set[str]:
    """The call_id of every function call in the context, which function_call_output items must answer."""
    items = [item for turn in history for item in (*turn.input_items, *turn.output_items)] + list(new_items)
    calls = ("function_call", "custom_tool_call", *CLIENT_TOOL_CALLS)
    return {item["call_id"] for item in items if item.get("type") in calls and item.get("call_id")}
