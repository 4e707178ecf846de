"""Responses items -> chat messages: the one place where a conversation becomes what the model reads."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.generation.tool_calls import FunctionSpec, render_call, render_call_output, render_custom_call, tools_prompt

# NOTE: chat templates of small open models rarely know the `developer` role; it is a system message to them.
TEMPLATE_ROLE = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
#: A compaction item as the model reads it: the services open its sealed content into `{type, id, summary}`.
COMPACTION_SUMMARY = "compaction_summary"
SUMMARY_HEADING = "Summary of the conversation so far:"


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str

    def as_template_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


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
) -> tuple[ChatMessage | None, list[ChatMessage]]:
    """The system message of this request (instructions and tools are never inherited) and the conversation.

    The conversation is every turn's input then its output, oldest first, then this request's own items.
    """
    system_parts = [part for part in (instructions, tools_prompt(functions) if functions else None) if part]
    system = ChatMessage("system", "\n\n".join(system_parts)) if system_parts else None
    items = [item for turn in history for item in (*turn.input_items, *turn.output_items)] + list(new_items)
    return system, _messages(apply_compaction(items), reasoning_tags)


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
        if item.get("type") in ("mcp_list_tools", "configuration_update"):
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
