"""The messages a template gets, adapted as llama.cpp adapts them before it renders (common/chat.cpp's
`workaround` namespace and each format's own adjustments), so that our prompt equals llama-server's: developer
turns as system turns (but for harmony), a system turn merged into the first user turn where the template has no
system role, content never null beside calls, arguments as objects where the template reads them so, content as
typed parts where the template only reads those, reasoning under the name the template reads."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from app.generation.chat.capabilities import TemplateCaps

Message = dict[str, Any]


def _developer_as_system(messages: list[Message]) -> None:
    for message in messages:
        if message.get("role") == "developer":
            message["role"] = "system"


def _merge_system(messages: list[Message]) -> list[Message]:
    """A template without a system role: the first system turn leads the next turn's text (dropped when alone)."""
    if not messages or messages[0].get("role") != "system":
        return messages
    if len(messages) == 1:
        return []
    merged = {**messages[1], "content": f"{messages[0].get('content', '')}\n{messages[1].get('content', '')}"}
    return [merged, *messages[2:]]


def _content_beside_calls(messages: list[Message]) -> None:
    for message in messages:
        if "tool_calls" in message and message.get("content") is None:
            message["content"] = ""


def _arguments_as_objects(messages: list[Message]) -> None:
    for message in messages:
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            if isinstance(function.get("arguments"), str):
                function["arguments"] = json.loads(function["arguments"])


def _typed_content(messages: list[Message]) -> None:
    for message in messages:
        if isinstance(message.get("content"), str):
            message["content"] = [{"type": "text", "text": message["content"]}]


def _thinking(messages: list[Message], *, drop_content_beside_calls: bool) -> None:
    """gpt-oss, LLM-jp and LFM2 read reasoning as `thinking` (harmony's: the calls' analysis, never with content)."""
    for message in messages:
        if isinstance(message.get("reasoning_content"), str):
            message["thinking"] = message["reasoning_content"]
            if drop_content_beside_calls and message.get("tool_calls"):
                message.pop("content", None)


def _reasoning_blocks(messages: list[Message]) -> None:
    """Ministral 3 / Magistral: system and assistant content as blocks, reasoning as a `thinking` block first."""
    for index, message in enumerate(messages):
        if message.get("role") not in ("system", "assistant"):
            continue
        blocks: list[dict[str, Any]] = []
        if isinstance(message.get("reasoning_content"), str):
            blocks.append({"type": "thinking", "thinking": message["reasoning_content"]})
        content = message.get("content")
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks += content
        adjusted = {**message, "content": blocks}
        adjusted.pop("reasoning_content", None)
        messages[index] = adjusted


def _results_in_call_order(messages: list[Message]) -> None:
    """DeepSeek V4 renders a run of tool results in the order of the calls they answer."""
    order: dict[str, int] = {}
    index = 0
    while index < len(messages):
        message = messages[index]
        if message.get("role") == "assistant" and message.get("tool_calls"):
            order = {call.get("id", ""): position for position, call in enumerate(message["tool_calls"])}
            index += 1
            continue
        if message.get("role") not in ("user", "tool"):
            index += 1
            continue
        end = index
        while end < len(messages) and messages[end].get("role") in ("user", "tool"):
            end += 1
        positions = [position for position in range(index, end) if messages[position].get("role") == "tool"]
        if len(positions) > 1 and order:
            results = sorted(
                (messages[position] for position in positions),
                key=lambda result: order.get(result.get("tool_call_id", ""), 0),
            )
            for position, result in zip(positions, results, strict=True):
                messages[position] = result
        index = end


def _strip_content(messages: list[Message]) -> None:
    """StepFun: contents trimmed (left as they are, its model reasons in loops; llama.cpp issue 24181)."""
    for message in messages:
        for key in ("content", "reasoning_content"):
            if isinstance(message.get(key), str):
                message[key] = message[key].strip()


def _tool_response(result: Message, call: Message | None) -> dict[str, Any]:
    content = result.get("content")
    response: Any = content
    if isinstance(content, str):
        try:
            response = json.loads(content)
        except ValueError:
            response = content
    name = (call or {}).get("function", {}).get("name") or result.get("tool_call_id", "")
    return {"name": name, "response": response}


def _gemma4_model_turns(messages: list[Message]) -> list[Message]:
    """Gemma 4's older templates: an assistant's calls, their results and the answer after them as one model turn
    with `tool_responses` (llama.cpp's convert_tool_responses_gemma4)."""
    result: list[Message] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            result.append(message)
            index += 1
            continue
        calls = list(message["tool_calls"])
        responses: list[dict[str, Any]] = []
        index += 1
        while index < len(messages) and messages[index].get("role") == "tool":
            responses.append(
                _tool_response(messages[index], calls[len(responses)] if len(responses) < len(calls) else None)
            )
            index += 1
        turn: Message = {"role": "assistant", "tool_calls": calls}
        if responses:
            turn["tool_responses"] = responses
        if index < len(messages) and messages[index].get("role") == "assistant":
            following = messages[index]
            if not following.get("tool_calls") and following.get("content"):
                turn["content"] = following["content"]
                index += 1
        if isinstance(message.get("reasoning_content"), str):
            turn["reasoning_content"] = message["reasoning_content"]
        result.append(turn)
    return result


def is_gemma4(source: str) -> bool:
    return "'<|tool_call>call:'" in source


def _format_adjustment(source: str) -> Callable[[list[Message]], None] | None:
    """The adjustment llama.cpp's dedicated handler of this template's format makes (common/parsers), if any."""
    if "[SYSTEM_PROMPT]" in source and "[TOOL_CALLS]" in source and "[ARGS]" in source and "[CALL_ID]" not in source:
        return _reasoning_blocks
    if "<|channel|>" in source or "chat_format=llm-jp-harmony-v1" in source:
        return lambda messages: _thinking(messages, drop_content_beside_calls=True)
    if _is_lfm2(source):
        return lambda messages: _thinking(messages, drop_content_beside_calls=False)
    if "dsml_token" in source and "DSML" in source and "function_calls" not in source and "tool_calls" in source:
        return _results_in_call_order
    return None


def _is_lfm2(source: str) -> bool:
    """llama.cpp's is_lfm2_template and its LFM2.5 test (a tools list as plain text)."""
    lfm2 = "<|tool_list_start|>" in source and "<|tool_list_end|>" in source
    return lfm2 or ("List of tools: [" in source and "<|tool_list_start|>" not in source)


def adapt_messages(messages: list[Message], source: str, caps: TemplateCaps) -> list[Message]:
    """`messages` (fresh dicts, changed in place where it is simplest) as llama.cpp hands them to this template."""
    if "You have access to the following functions in JSONSchema format" in source:
        _strip_content(messages)
    if caps.supports_typed_content and not caps.supports_string_content:
        _typed_content(messages)
    if "<|channel|>" not in source:
        _developer_as_system(messages)
    if not caps.supports_system_role:
        messages = _merge_system(messages)
    if caps.supports_tool_calls:
        _content_beside_calls(messages)
    if caps.supports_object_arguments:
        _arguments_as_objects(messages)
    adjustment = _format_adjustment(source)
    if adjustment is not None:
        adjustment(messages)
    if is_gemma4(source) and "{#- OpenAI Chat Completions:" not in source:
        messages = _gemma4_model_turns(messages)
    return messages
