"""Items -> the messages a template that renders calls takes (as a Chat Completions client sends llama-server):
the model's reasoning, text and calls of one turn in one assistant message, each result a `tool` message with its
call's id and name, MCP calls' results after all the turn's calls, custom and client tool calls as functions."""

from __future__ import annotations

import json

from app.generation.prompt import ChatMessage, PromptContext, ToolCall, build_context, structured_messages


def user(text: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_a_turn_s_reasoning_text_and_calls_are_one_message_and_results_follow() -> None:
    items = [
        user("Weather in Paris and Rome?"),
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Two cities."}],
        },
        {
            "type": "message",
            "role": "assistant",
            "phase": "commentary",
            "content": [{"type": "output_text", "text": "Checking."}],
        },
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "18 C"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "24 C"}]},
    ]
    assert structured_messages(items) == [
        ChatMessage("user", "Weather in Paris and Rome?"),
        ChatMessage(
            "assistant",
            "Checking.",
            (ToolCall("c1", "weather", '{"city": "Paris"}'), ToolCall("c2", "weather", '{"city": "Rome"}')),
            reasoning="Two cities.",
        ),
        ChatMessage("tool", "18 C", tool_call_id="c1", name="weather"),
        ChatMessage("tool", "24 C", tool_call_id="c2", name="weather"),
    ]
    assert structured_messages(items)[1].as_template_dict() == {
        "role": "assistant",
        "content": "Checking.",
        "reasoning_content": "Two cities.",
        "tool_calls": [
            {"type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}, "id": "c1"},
            {"type": "function", "function": {"name": "weather", "arguments": '{"city": "Rome"}'}, "id": "c2"},
        ],
    }


def test_mcp_calls_custom_and_client_tools_and_a_summary() -> None:
    items = [
        user("Go."),
        {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "s", "tools": []},
        {"type": "mcp_call", "id": "mcp_1", "name": "add", "arguments": '{"a": 1}', "output": "2", "server_label": "s"},
        {
            "type": "mcp_call",
            "id": "mcp_2",
            "name": "add",
            "arguments": '{"a": 2}',
            "error": {"message": "down"},
            "server_label": "s",
        },
        {"type": "custom_tool_call", "call_id": "c3", "name": "patch", "input": "-a\n+b"},
        {"type": "custom_tool_call_output", "call_id": "c3", "output": "ok"},
        {"type": "shell_call", "call_id": "c4", "action": {"commands": ["ls"]}, "status": "completed"},
        {"type": "compaction_summary", "id": "cmp_1", "summary": "Earlier work."},
    ]
    messages = structured_messages(items)
    # The MCP calls and the custom call are one turn's: one message, the MCP results, then the client's result.
    assert [message.role for message in messages] == ["user", "assistant", "tool", "tool", "tool", "assistant", "user"]
    assert [call.id for call in messages[1].tool_calls] == ["mcp_1", "mcp_2", "c3"]
    assert messages[2].content == "2" and messages[3].content == "Error: down" and messages[3].name == "add"
    assert json.loads(messages[1].tool_calls[2].arguments) == {"input": "-a\n+b"}
    assert messages[4] == ChatMessage("tool", "ok", tool_call_id="c3", name="patch")
    shell = messages[5].tool_calls[0]
    assert shell.name == "shell" and json.loads(shell.arguments) == {"commands": ["ls"]}
    assert messages[6].content == "Summary of the conversation so far:\nEarlier work."


def test_a_tool_round_renders_the_context_with_the_round_s_items_after_it() -> None:
    system, messages = build_context(instructions="Be brief.", history=(), new_items=[user("Go.")], structured=True)
    context = PromptContext(system=system, messages=tuple(messages), template_options={"tools": []}, structured=True)
    again = PromptContext.from_payload(context.to_payload())
    assert again == context
    mcp_call = {"type": "mcp_call", "id": "mcp_1", "name": "add", "arguments": "{}", "output": "2"}
    assert again.with_items([mcp_call])[1:] == [
        ChatMessage("assistant", "", (ToolCall("mcp_1", "add", "{}"),)),
        ChatMessage("tool", "2", tool_call_id="mcp_1", name="add"),
    ]
