"""A round in which the model calls an MCP tool and a client tool (a function) together, on the fake model against a
real MCP server on loopback: the response makes the MCP calls, then ends `completed` with the function_call items
for the client; its function_call_output goes on from there, and no call is lost or made twice."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.generation.tool_calls import render_call, render_call_output
from app.testing.fakes import FakeRenderer, FakeRunner
from app.testing.mcp_server import ToolServer, tool_server
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

pytestmark = pytest.mark.settings(outbound_allowed_hosts="127.0.0.1:*")

ADD = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
LOOKUP = '<tool_call>{"name": "lookup", "arguments": {"q": "x"}}</tool_call>'
FUNCTION = {
    "type": "function",
    "name": "lookup",
    "description": "Look something up (the client runs it).",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}


@pytest.fixture
async def server() -> AsyncIterator[ToolServer]:
    async with tool_server() as running:
        yield running


def tools(server: ToolServer, require_approval: str = "never") -> list[dict[str, Any]]:
    mcp = {"type": "mcp", "server_label": "calc", "server_url": server.url, "require_approval": require_approval}
    return [mcp, FUNCTION]


def rounds(runner: FakeRunner, *texts: str) -> None:
    runner.replies = [text.split(" ") for text in texts]


async def create(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    reply = await client.post("/v1/responses", json=body)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


@pytest.mark.parametrize("calls", [f"{ADD} {LOOKUP}", f"{LOOKUP} {ADD}"], ids=["mcp-first", "function-first"])
async def test_mcp_calls_are_made_then_the_response_ends_with_the_function_calls(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer, server: ToolServer, calls: str
) -> None:
    rounds(runner, calls, calls, "never said")
    plain = await create(client, input="2 + 3, and look x up", tools=tools(server))
    reply = await client.post(
        "/v1/responses", json={"input": "2 + 3, and look x up", "tools": tools(server), "stream": True}
    )
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert final["status"] == "completed"
    listing, mcp_call, function_call = final["output"]
    assert listing["type"] == "mcp_list_tools"
    assert [item["type"] for item in plain["output"]] == ["mcp_list_tools", "mcp_call", "function_call"]
    assert plain["status"] == "completed"
    assert mcp_call["type"] == "mcp_call" and mcp_call["status"] == "completed" and mcp_call["output"] == "5"
    assert function_call["type"] == "function_call" and function_call["name"] == "lookup"
    assert function_call["status"] == "completed" and json.loads(function_call["arguments"]) == {"q": "x"}
    kinds = [event["type"] for event in events]
    assert kinds.index("response.mcp_call.completed") < kinds.index("response.function_call_arguments.done")
    assert server.calls == [("add", {"a": 2, "b": 3})] * 2, "one call a response"
    assert len(runner.jobs) == 2, "the model ran once a response: the client's tool ends it"
    stored = (await client.get(f"/v1/responses/{final['id']}")).json()
    assert stored["output"] == final["output"]
    # The client's output goes on from there: the MCP call is read as made, never made again.
    rounds(runner, "5, and x is y.")
    output = {"type": "function_call_output", "call_id": function_call["call_id"], "output": "y"}
    answer = await create(client, input=[output], tools=tools(server), previous_response_id=final["id"])
    assert answer["status"] == "completed"
    assert [item["type"] for item in answer["output"]] == ["message"]
    assert server.calls == [("add", {"a": 2, "b": 3})] * 2
    assert len(runner.jobs) == 3
    contents = [message.content for message in renderer.rendered[-1][1:]]
    mcp_turn = [render_call("add", mcp_call["arguments"]), render_call_output("5")]
    assert contents[1:3] == mcp_turn
    assert contents[-1] == render_call_output("y") and "lookup" in contents[-2]


async def test_without_parallel_calls_only_the_first_call_counts(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    rounds(runner, f"{ADD} {LOOKUP}", "Done.")
    first = await create(client, input="x", tools=tools(server), parallel_tool_calls=False)
    assert [item["type"] for item in first["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert server.calls == [("add", {"a": 2, "b": 3})]
    rounds(runner, f"{LOOKUP} {ADD}")
    second = await create(client, input="x", tools=tools(server), parallel_tool_calls=False)
    assert [item["type"] for item in second["output"]] == ["mcp_list_tools", "function_call"]
    assert server.calls == [("add", {"a": 2, "b": 3})], "the MCP call after it was not made"


async def test_a_call_that_waits_for_approval_and_a_function_call_end_the_response_together(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    rounds(runner, f"{ADD} {LOOKUP}", "never said")
    body = await create(client, input="x", tools=tools(server, require_approval="always"))
    assert body["status"] == "completed"
    assert [item["type"] for item in body["output"]] == ["mcp_list_tools", "mcp_approval_request", "function_call"]
    assert server.calls == [] and len(runner.jobs) == 1
    # Both answered in the next request: the approved call is made, then the model goes on.
    request, call = body["output"][1:]
    rounds(runner, "Both done.")
    answers = [
        {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "y"},
    ]
    answer = await create(client, input=answers, tools=tools(server), previous_response_id=body["id"])
    assert [item["type"] for item in answer["output"]] == ["mcp_call", "message"]
    assert server.calls == [("add", {"a": 2, "b": 3})]


async def test_a_cut_mcp_call_is_not_returned_as_a_function_call(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    words = " ".join(["w"] * 30)
    rounds(runner, f'<tool_call>{{"name": "echo", "arguments": {{"text": "{words}"}}}}</tool_call>')
    body = await create(client, input="x", tools=tools(server), max_output_tokens=16)
    assert body["status"] == "incomplete"
    assert [item["type"] for item in body["output"]] == ["mcp_list_tools", "message"]
    assert body["output"][1]["content"][0]["text"] == "", "its markup is not text either"
    assert server.calls == []
