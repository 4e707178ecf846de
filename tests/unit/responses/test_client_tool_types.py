"""Client-executed tool types (shell, apply_patch, local_shell, tool_search with execution "client"), as Codex CLI
and the Agents SDK send them: offered to the model as functions, their calls returned as the SDK's items of those
types, their outputs taken back as input, stored and shown to the model."""

from __future__ import annotations

import json
from typing import Any

import httpx
from openai.types.responses import (
    ResponseApplyPatchToolCall,
    ResponseApplyPatchToolCallOutput,
    ResponseFunctionShellToolCall,
    ResponseFunctionShellToolCallOutput,
    ResponseToolSearchCall,
    ResponseToolSearchOutputItem,
)
from openai.types.responses.response_output_item import LocalShellCall

from app.testing.fakes import FakeRenderer, FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_error, assert_well_formed_stream

SHELL = {"type": "shell", "environment": {"type": "local"}}
PATCH = {"type": "apply_patch"}
SEARCH = {
    "type": "tool_search",
    "execution": "client",
    "description": "Find deferred tools.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
        "required": ["query"],
    },
}


def call(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def says(runner: FakeRunner, text: str) -> None:
    runner.reply = [text]


async def test_a_shell_call_is_a_shell_call_item_streamed_command_by_command(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    says(runner, call("shell", {"commands": ["ls -la", "cat README.md"], "timeout_ms": 5000}))
    reply = await client.post("/v1/responses", json={"input": "List files", "tools": [SHELL], "stream": True})
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    kinds = [event["type"] for event in events]
    assert kinds[2:10] == [
        "response.output_item.added",
        *["response.shell_call_command.added", "response.shell_call_command.delta", "response.shell_call_command.done"]
        * 2,
        "response.output_item.done",
    ]
    (item,) = final["output"]
    parsed = ResponseFunctionShellToolCall.model_validate(item)
    assert parsed.action.commands == ["ls -la", "cat README.md"] and parsed.action.timeout_ms == 5000
    assert parsed.status == "completed" and parsed.id.startswith("sh_") and parsed.call_id.startswith("call_")
    assert events[2]["item"]["action"]["commands"] == [] and events[2]["item"]["status"] == "in_progress"
    assert final["tools"] == [SHELL], "echoed as sent"


async def test_shell_output_goes_back_to_the_model_chained_and_stateless(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer
) -> None:
    says(runner, call("shell", {"commands": ["echo hi"]}))
    first = (await client.post("/v1/responses", json={"input": "Say hi", "tools": [SHELL]})).json()
    shell_call = first["output"][0]
    output = {
        "type": "shell_call_output",
        "call_id": shell_call["call_id"],
        "output": [{"stdout": "hi\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
    }
    says(runner, "It printed hi.")
    second = await client.post(
        "/v1/responses", json={"input": [output], "previous_response_id": first["id"], "tools": [SHELL]}
    )
    assert second.status_code == 200, second.text
    seen = renderer.rendered[-1]
    assert "<tool_call>" in seen[-2].content and '"commands": ["echo hi"]' in seen[-2].content
    assert seen[-1].content == "<tool_response>\nhi\n(exit code 0)\n</tool_response>"
    listed = (await client.get(f"/v1/responses/{second.json()['id']}/input_items")).json()["data"]
    stored = ResponseFunctionShellToolCallOutput.model_validate(listed[0])
    assert stored.call_id == shell_call["call_id"] and stored.id.startswith("sho_")
    assert stored.output[0].outcome.type == "exit"
    stateless = await client.post(
        "/v1/responses",
        json={"input": [{"role": "user", "content": "Say hi"}, shell_call, output], "tools": [SHELL]},
    )
    assert stateless.status_code == 200, stateless.text
    assert renderer.rendered[-1][-1].content == seen[-1].content


async def test_apply_patch_calls_carry_one_operation_and_take_their_output_back(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer
) -> None:
    create = {"type": "create_file", "path": "hello.py", "diff": "+print('hi')\n"}
    delete = {"type": "delete_file", "path": "old.py"}
    says(runner, call("apply_patch", create) + call("apply_patch", delete))
    reply = await client.post("/v1/responses", json={"input": "Patch", "tools": [PATCH], "stream": True})
    final = assert_well_formed_stream(parse_sse(reply.text))
    created, deleted = (ResponseApplyPatchToolCall.model_validate(item) for item in final["output"])
    assert created.operation.model_dump() == create and created.status == "completed"
    assert deleted.operation.type == "delete_file" and deleted.operation.path == "old.py"
    answers = [
        {"type": "apply_patch_call_output", "call_id": created.call_id, "status": "completed", "output": "Created"},
        {"type": "apply_patch_call_output", "call_id": deleted.call_id, "status": "failed"},
    ]
    says(runner, "Done.")
    second = await client.post(
        "/v1/responses", json={"input": answers, "previous_response_id": final["id"], "tools": [PATCH]}
    )
    assert second.status_code == 200, second.text
    seen = renderer.rendered[-1]
    assert [message.content for message in seen[-2:]] == [
        "<tool_response>\nCreated\n</tool_response>",
        "<tool_response>\nFailed.\n</tool_response>",
    ]
    listed = (await client.get(f"/v1/responses/{second.json()['id']}/input_items?order=asc")).json()["data"]
    assert [ResponseApplyPatchToolCallOutput.model_validate(item).status for item in listed] == ["completed", "failed"]


async def test_local_shell_and_client_tool_search_calls_are_their_sdk_items(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer
) -> None:
    says(runner, call("local_shell", {"command": ["ls", "-l"], "working_directory": "/tmp"}))
    body = (await client.post("/v1/responses", json={"input": "ls", "tools": [{"type": "local_shell"}]})).json()
    local = LocalShellCall.model_validate(body["output"][0])
    assert local.action.command == ["ls", "-l"] and local.action.working_directory == "/tmp" and local.action.env == {}
    output = {"type": "local_shell_call_output", "id": local.call_id, "output": '{"stdout": "a.txt"}'}
    says(runner, "One file.")
    second = await client.post(
        "/v1/responses",
        json={"input": [output], "previous_response_id": body["id"], "tools": [{"type": "local_shell"}]},
    )
    assert second.status_code == 200, second.text
    assert "a.txt" in renderer.rendered[-1][-1].content

    says(runner, call("tool_search", {"query": "calendar", "limit": 3}))
    body = (await client.post("/v1/responses", json={"input": "Find a calendar tool", "tools": [SEARCH]})).json()
    search = ResponseToolSearchCall.model_validate(body["output"][0])
    assert search.execution == "client" and search.arguments == {"query": "calendar", "limit": 3}
    found = {
        "type": "tool_search_output",
        "call_id": search.call_id,
        "execution": "client",
        "status": "completed",
        "tools": [{"type": "function", "name": "add_event", "parameters": {"type": "object", "properties": {}}}],
    }
    says(runner, call("add_event", {}))
    second = await client.post(
        "/v1/responses", json={"input": [found], "previous_response_id": body["id"], "tools": [SEARCH]}
    )
    assert second.status_code == 200, second.text
    assert "add_event" in renderer.rendered[-1][-1].content
    (found_call,) = second.json()["output"]
    assert found_call["type"] == "function_call" and found_call["name"] == "add_event", (
        "what a search found is callable"
    )
    assert second.json()["tools"] == [SEARCH], "echoed as the request sent them"
    listed = (await client.get(f"/v1/responses/{second.json()['id']}/input_items")).json()["data"]
    assert ResponseToolSearchOutputItem.model_validate(listed[0]).tools[0].type == "function"


async def test_forms_run_on_openais_side_stay_ignored_and_named(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    tools = [{"type": "shell", "environment": {"type": "container_auto"}}, {"type": "tool_search"}, PATCH]
    reply = await client.post("/v1/responses", json={"input": "x", "tools": tools})
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-llama-responses-ignored-tools"] == "shell, tool_search"
    assert list(runner.jobs[-1].functions) == ["apply_patch"] and runner.jobs[-1].tool_types == ["apply_patch"]


async def test_tool_choice_forces_a_shell_or_patch_call_by_grammar(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    for kind, tool in (("shell", SHELL), ("apply_patch", PATCH)):
        reply = await client.post(
            "/v1/responses", json={"input": "x", "tools": [tool, SEARCH], "tool_choice": {"type": kind}}
        )
        assert reply.status_code == 200, reply.text
        grammar = runner.jobs[-1].sampling.grammar
        assert grammar is not None and f'\\"{kind}\\"' in grammar and "tool_search" not in grammar
    missing = await client.post(
        "/v1/responses", json={"input": "x", "tools": [SHELL], "tool_choice": {"type": "apply_patch"}}
    )
    assert_error(missing, 400, param="tool_choice.type", code="invalid_value")


async def test_a_call_the_client_could_not_run_stays_text(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    text = call("shell", {"commands": "ls"})
    says(runner, text)
    body = (await client.post("/v1/responses", json={"input": "x", "tools": [SHELL]})).json()
    assert [item["type"] for item in body["output"]] == ["message"]
    assert body["output"][0]["content"][0]["text"] == text


async def test_an_output_must_answer_a_call_of_its_context(client: httpx.AsyncClient) -> None:
    output = {"type": "apply_patch_call_output", "call_id": "call_nowhere", "status": "completed"}
    reply = await client.post("/v1/responses", json={"input": [output], "tools": [PATCH]})
    assert_error(reply, 400, param="input[0].call_id", code="invalid_value")
    bad = {"type": "shell_call_output", "call_id": "call_x", "output": [{"stdout": 1}]}
    reply = await client.post("/v1/responses", json={"input": [bad], "tools": [SHELL]})
    assert reply.status_code == 400 and reply.json()["error"]["param"].startswith("input[0]")


async def test_a_cut_call_is_an_incomplete_item_or_none_where_the_type_has_no_such_status(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    runner.separator = ""
    shell = call("shell", {"commands": ["ls -la /tmp"]})
    # 16 empty pieces: max_output_tokens is at least 16; the cut falls inside the commands.
    runner.reply = [""] * 16 + list(shell)
    reply = await client.post(
        "/v1/responses", json={"input": "x", "tools": [SHELL], "max_output_tokens": 16 + shell.index("/tmp")}
    )
    body = reply.json()
    assert body["status"] == "incomplete"
    (item,) = body["output"]
    cut = ResponseFunctionShellToolCall.model_validate(item)
    assert cut.status == "incomplete" and cut.action.commands == []
    patch = call("apply_patch", {"type": "create_file", "path": "a.py", "diff": "+x"})
    runner.reply = [""] * 16 + list(patch)
    reply = await client.post(
        "/v1/responses", json={"input": "x", "tools": [PATCH], "max_output_tokens": 16 + patch.index("a.py")}
    )
    body = reply.json()
    assert body["status"] == "incomplete" and [item["type"] for item in body["output"]] == ["message"]
    assert body["output"][0]["content"][0]["text"] == "", "no operation to apply, and never the call markup"
