"""MCP approvals through the API, on the fake model against a real MCP server on loopback: require_approval, the
mcp_approval_request that ends a response, the mcp_approval_response that calls the tool (or tells the model it
may not) chained, in a conversation or resent whole, and mcp_* items resent as input."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.generation.prompt import denial
from app.generation.tool_calls import render_call, render_call_output
from app.testing.fakes import FakeRenderer, FakeRunner
from app.testing.mcp_server import ToolServer, tool_server
from app.testing.sse import parse_sse
from tests.protocol import assert_error, assert_well_formed_stream

pytestmark = pytest.mark.settings(outbound_allowed_hosts="127.0.0.1:*")

ADD = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
ECHO = '<tool_call>{"name": "echo", "arguments": {"text": "hi"}}</tool_call>'
ADD_ARGUMENTS = '{"a": 2, "b": 3}'


@pytest.fixture
async def server() -> AsyncIterator[ToolServer]:
    async with tool_server() as running:
        yield running


def mcp_tool(server: ToolServer, **fields: object) -> dict[str, object]:
    """An mcp tool with the default require_approval (none given: every call is approved first)."""
    return {"type": "mcp", "server_label": "calc", "server_url": server.url, **fields}


def rounds(runner: FakeRunner, *texts: str) -> None:
    runner.replies = [text.split(" ") for text in texts]


def prompt_text(runner: FakeRunner, index: int = -1) -> str:
    """A run's prompt as the fake renderer reads it (a line a message)."""
    renderer = runner.prompt_renderer
    assert isinstance(renderer, FakeRenderer)
    return renderer.read(runner.jobs[index].prompt_tokens)


def approval(request_id: str, *, approve: bool = True, reason: str | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": approve}
    if reason is not None:
        answer["reason"] = reason
    return answer


async def create(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    reply = await client.post("/v1/responses", json=body)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


async def request_approval(client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer) -> dict[str, Any]:
    rounds(runner, ADD)
    return await create(client, input="2 + 3?", tools=[mcp_tool(server)])


async def test_a_call_that_needs_approval_ends_the_response_with_its_request(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    rounds(runner, ADD, "never said")
    reply = await client.post("/v1/responses", json={"input": "2 + 3?", "tools": [mcp_tool(server)], "stream": True})
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert final["status"] == "completed"
    listing, request = final["output"]
    assert listing["type"] == "mcp_list_tools"
    assert set(request) == {"id", "type", "server_label", "name", "arguments"}
    assert request["type"] == "mcp_approval_request" and request["id"].startswith("mcpr_")
    assert request["server_label"] == "calc" and request["name"] == "add" and request["arguments"] == ADD_ARGUMENTS
    added = [event for event in events if event["type"] == "response.output_item.added"]
    assert added[-1]["item"] == request, "the request is whole when added"
    assert not any(event["type"].startswith("response.mcp_call") for event in events)
    assert server.calls == [], "nothing called"
    assert len(runner.jobs) == 1, "the model was not asked again"
    stored = (await client.get(f"/v1/responses/{final['id']}")).json()
    assert stored["output"] == final["output"]


async def test_an_approval_chained_calls_the_tool_and_the_model_goes_on(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    first = await request_approval(client, runner, server)
    request = first["output"][1]
    listings = len(server.headers)
    rounds(runner, "The sum is 5.")
    body = {
        "input": [approval(request["id"])],
        "tools": [mcp_tool(server)],
        "previous_response_id": first["id"],
        "stream": True,
    }
    reply = await client.post("/v1/responses", json=body)
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert final["status"] == "completed"
    call, message = final["output"]
    assert call["type"] == "mcp_call" and call["approval_request_id"] == request["id"]
    assert call["status"] == "completed" and call["output"] == "5" and call["arguments"] == ADD_ARGUMENTS
    assert message["content"][0]["text"] == "The sum is 5."
    assert server.calls == [("add", {"a": 2, "b": 3})]
    kinds = [event["type"] for event in events]
    assert "response.mcp_call.in_progress" in kinds and "response.mcp_call.completed" in kinds
    assert "response.mcp_list_tools.in_progress" not in kinds, "the chain's listing is reused"
    # The model read the call and its result as if it had made the call itself this round.
    assert len(runner.jobs) == 2
    call_text = render_call("add", ADD_ARGUMENTS)
    assert prompt_text(runner).endswith(f"assistant: {call_text}\nuser: {render_call_output('5')}\n")
    assert runner.jobs[-1].sampling.grammar is None
    input_items = (await client.get(f"/v1/responses/{final['id']}/input_items")).json()["data"]
    assert [(item["type"], item["approve"]) for item in input_items] == [("mcp_approval_response", True)]
    assert input_items[0]["id"].startswith("mcpa_")
    # A later turn reads the call from the chain, and the request is answered once.
    again = await client.post(
        "/v1/responses",
        json={"input": [approval(request["id"])], "tools": [mcp_tool(server)], "previous_response_id": final["id"]},
    )
    assert_error(again, 400, param="input[0].approval_request_id", code="invalid_value")
    assert len(server.headers) > listings


async def test_a_denial_tells_the_model_and_calls_nothing(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer, server: ToolServer
) -> None:
    first = await request_approval(client, runner, server)
    rounds(runner, "Fine, I will not add.")
    second = await create(
        client,
        input=[approval(first["output"][1]["id"], approve=False, reason="not today")],
        tools=[mcp_tool(server)],
        previous_response_id=first["id"],
    )
    assert second["status"] == "completed"
    assert [item["type"] for item in second["output"]] == ["message"]
    assert server.calls == []
    *_, call, result = renderer.rendered[-1]
    assert call.role == "assistant" and call.content == render_call("add", ADD_ARGUMENTS)
    assert result.role == "user" and result.content == render_call_output(denial("not today"))
    assert "not today" in result.content


async def test_approvals_in_a_conversation(client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer) -> None:
    conversation = (await client.post("/v1/conversations", json={})).json()["id"]
    rounds(runner, ADD)
    first = await create(client, input="2 + 3?", tools=[mcp_tool(server)], conversation=conversation)
    request = first["output"][-1]
    assert request["type"] == "mcp_approval_request"
    rounds(runner, "5.")
    second = await create(client, input=[approval(request["id"])], tools=[mcp_tool(server)], conversation=conversation)
    assert [item["type"] for item in second["output"]] == ["mcp_call", "message"]
    assert second["output"][0]["approval_request_id"] == request["id"]
    assert server.calls == [("add", {"a": 2, "b": 3})]
    items = (await client.get(f"/v1/conversations/{conversation}/items", params={"order": "asc"})).json()["data"]
    assert [item["type"] for item in items] == [
        "message",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "message",
    ]
    reply = await client.post(
        "/v1/responses",
        json={"input": [approval(request["id"])], "tools": [mcp_tool(server)], "conversation": conversation},
    )
    assert_error(reply, 400, param="input[0].approval_request_id", code="invalid_value")


async def test_the_whole_history_resent_answers_an_approval(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    first = await request_approval(client, runner, server)
    history = [{"role": "user", "content": "2 + 3?"}, *first["output"]]
    rounds(runner, "5.")
    second = await create(
        client, input=[*history, approval(first["output"][1]["id"])], tools=[mcp_tool(server)], store=False
    )
    assert [item["type"] for item in second["output"]] == ["mcp_call", "message"], "no second listing"
    assert second["output"][0]["output"] == "5"
    assert server.calls == [("add", {"a": 2, "b": 3})]
    # Resent again with the call this turn made: nothing is called twice, the model reads it all.
    rounds(runner, "Still 5.")
    third = await create(
        client,
        input=[*history, approval(first["output"][1]["id"]), *second["output"], {"role": "user", "content": "And?"}],
        tools=[mcp_tool(server)],
        store=False,
    )
    assert [item["type"] for item in third["output"]] == ["message"]
    assert server.calls == [("add", {"a": 2, "b": 3})]


async def test_resent_mcp_items_are_read_like_chained_ones(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer, server: ToolServer
) -> None:
    rounds(runner, ADD, "5.")
    first = await create(client, input="2 + 3?", tools=[mcp_tool(server, require_approval="never")])
    listing, call, answer = first["output"]
    requests_before = len(server.headers)
    rounds(runner, "Yes.")
    second = await create(
        client,
        input=[{"role": "user", "content": "2 + 3?"}, listing, call, answer, {"role": "user", "content": "Sure?"}],
        tools=[mcp_tool(server, require_approval="never")],
    )
    assert [item["type"] for item in second["output"]] == ["message"], "the resent listing counts"
    assert len(server.headers) == requests_before, "the server was not asked again"
    system, *conversation = renderer.rendered[-1]
    assert '"name": "add"' in system.content
    assert [message.content for message in conversation] == [
        "2 + 3?",
        render_call("add", ADD_ARGUMENTS),
        render_call_output("5"),
        "5.",
        "Sure?",
    ]
    stored = (await client.get(f"/v1/responses/{second['id']}/input_items", params={"order": "asc"})).json()["data"]
    assert [item["id"] for item in stored[1:4]] == [listing["id"], call["id"], answer["id"]]
    # A resent failed call (the SDK's error is a string) reads as an error.
    failed = {**call, "id": "mcp_resent", "status": "failed", "output": None, "error": "the server broke"}
    rounds(runner, "Oh.")
    third = await create(client, input=[{"role": "user", "content": "2 + 3?"}, listing, failed], tools=[])
    assert third["status"] == "completed"
    assert renderer.rendered[-1][-1].content == render_call_output("Error: the server broke")


async def test_cancel_aborts_an_approved_call_in_flight(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    rounds(runner, '<tool_call>{"name": "slow", "arguments": {}}</tool_call>')
    first = await create(client, input="slow", tools=[mcp_tool(server)])
    request = first["output"][1]
    assert request["name"] == "slow"
    second = await create(
        client,
        input=[approval(request["id"])],
        tools=[mcp_tool(server)],
        previous_response_id=first["id"],
        background=True,
    )
    deadline = time.monotonic() + 10
    while ("slow", {}) not in server.calls:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    cancelled = await client.post(f"/v1/responses/{second['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    while (body := (await client.get(f"/v1/responses/{second['id']}")).json())["status"] in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    assert body["status"] == "cancelled"
    (call,) = body["output"]
    assert call["approval_request_id"] == request["id"] and call["status"] == "failed"
    assert len(runner.jobs) == 1, "the model never ran after the approval"


@pytest.mark.parametrize(
    ("require_approval", "asked"),
    [
        ("never", []),
        ("always", ["add", "echo"]),
        ({"never": {"tool_names": ["add"]}}, ["echo"]),
        ({"always": {"tool_names": ["echo"]}}, ["echo"]),
        ({"always": {"tool_names": ["add"]}, "never": {"tool_names": ["add", "echo"]}}, ["add"]),
        ({"never": {"read_only": True}}, ["add", "echo"]),
        ({"never": {"read_only": False}}, []),
    ],
)
async def test_require_approval_picks_the_calls_that_wait(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer, require_approval: object, asked: list[str]
) -> None:
    rounds(runner, f"{ADD}{ECHO}", "Done.")
    runner.separator = ""
    body = await create(client, input="x", tools=[mcp_tool(server, require_approval=require_approval)])
    requests = [item["name"] for item in body["output"] if item["type"] == "mcp_approval_request"]
    calls = [item["name"] for item in body["output"] if item["type"] == "mcp_call"]
    assert requests == asked
    assert sorted(calls) == sorted({"add", "echo"} - set(asked)), "the others are called in the same round"
    assert [name for name, _ in server.calls] == calls
    # A request for approval ends the response after its round; without one the model goes on.
    assert body["status"] == "completed"
    assert len(runner.jobs) == (1 if asked else 2)
    assert (body["output"][-1]["type"] == "message") is not asked


@pytest.mark.parametrize(
    ("require_approval", "param"),
    [
        ("sometimes", "tools[0].require_approval"),
        ({"always": {"tool_names": ["add"]}, "maybe": {}}, "tools[0].require_approval.maybe"),
        ({"never": {"names": ["add"]}}, "tools[0].require_approval.never.names"),
        (["always"], "tools[0].require_approval"),
    ],
)
async def test_bad_require_approval_is_a_400(
    client: httpx.AsyncClient, server: ToolServer, require_approval: object, param: str
) -> None:
    reply = await client.post(
        "/v1/responses", json={"input": "x", "tools": [mcp_tool(server, require_approval=require_approval)]}
    )
    assert_error(reply, 400, param=param)


async def test_bad_approval_responses_are_400s(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    first = await request_approval(client, runner, server)
    request_id = first["output"][1]["id"]
    tools = [mcp_tool(server)]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"input": [approval("mcpr_unknown")], "previous_response_id": first["id"]}, "input[0].approval_request_id"),
        ({"input": [approval("mcpr_unknown")]}, "input[0].approval_request_id"),
        (
            {"input": [approval(request_id), approval(request_id)], "previous_response_id": first["id"]},
            "input[1].approval_request_id",
        ),
        ({"input": [approval(request_id)], "previous_response_id": first["id"], "tools": []}, "input[0]"),
        (
            {
                "input": [approval(request_id)],
                "previous_response_id": first["id"],
                "tools": [mcp_tool(server, allowed_tools=["echo"])],
            },
            "input[0]",
        ),
        ({"input": [{"type": "mcp_approval_response", "approve": True}]}, "input[0].approval_request_id"),
    ]
    for body, param in cases:
        reply = await client.post("/v1/responses", json={"tools": tools, **body})
        assert_error(reply, 400, param=param)
    assert server.calls == []


async def add_items(client: httpx.AsyncClient, conversation: str, *items: dict[str, Any]) -> httpx.Response:
    return await client.post(f"/v1/conversations/{conversation}/items", json={"items": list(items)})


async def test_an_approval_added_as_a_conversation_item_is_made_by_the_next_response(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    conversation = (await client.post("/v1/conversations", json={})).json()["id"]
    rounds(runner, ADD)
    first = await create(client, input="2 + 3?", tools=[mcp_tool(server)], conversation=conversation)
    request = first["output"][-1]
    added = await add_items(client, conversation, approval(request["id"]))
    assert added.status_code == 200, added.text
    assert server.calls == [], "adding the approval calls nothing"
    # Answered once: not again as an item, nor in a create's input.
    again = await add_items(client, conversation, {"role": "user", "content": "x"}, approval(request["id"]))
    assert_error(again, 400, param="items[1].approval_request_id", code="invalid_value")
    reply = await client.post(
        "/v1/responses",
        json={"input": [approval(request["id"])], "tools": [mcp_tool(server)], "conversation": conversation},
    )
    assert_error(reply, 400, param="input[0].approval_request_id", code="invalid_value")
    # The approved call needs its tool offered.
    reply = await client.post("/v1/responses", json={"input": [], "tools": [], "conversation": conversation})
    assert_error(reply, 400, param="conversation", code="invalid_value")
    assert server.calls == []
    rounds(runner, "The sum is 5.")
    second = await create(client, input=[], tools=[mcp_tool(server)], conversation=conversation)
    assert second["status"] == "completed"
    call, message = second["output"]
    assert call["type"] == "mcp_call" and call["approval_request_id"] == request["id"] and call["output"] == "5"
    assert message["content"][0]["text"] == "The sum is 5."
    assert server.calls == [("add", {"a": 2, "b": 3})]
    call_text = render_call("add", ADD_ARGUMENTS)
    assert prompt_text(runner).endswith(f"assistant: {call_text}\nuser: {render_call_output('5')}\n")
    # The call is in the conversation now: the next response does not make it again.
    rounds(runner, "Still 5.")
    third = await create(client, input="Sure?", tools=[mcp_tool(server)], conversation=conversation)
    assert [item["type"] for item in third["output"]] == ["message"]
    assert server.calls == [("add", {"a": 2, "b": 3})]


async def test_a_denial_added_as_a_conversation_item_calls_nothing(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer, server: ToolServer
) -> None:
    conversation = (await client.post("/v1/conversations", json={})).json()["id"]
    rounds(runner, ADD)
    first = await create(client, input="2 + 3?", tools=[mcp_tool(server)], conversation=conversation)
    added = await add_items(client, conversation, approval(first["output"][-1]["id"], approve=False, reason="no"))
    assert added.status_code == 200, added.text
    rounds(runner, "Fine.")
    second = await create(client, input="And now?", tools=[], conversation=conversation)
    assert [item["type"] for item in second["output"]] == ["message"]
    assert server.calls == []
    assert renderer.rendered[-1][-2].content == render_call_output(denial("no"))


async def test_bad_approvals_added_as_conversation_items_are_400s(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    conversation = (await client.post("/v1/conversations", json={})).json()["id"]
    other = (await client.post("/v1/conversations", json={})).json()["id"]
    rounds(runner, ADD)
    first = await create(client, input="2 + 3?", tools=[mcp_tool(server)], conversation=conversation)
    request_id = first["output"][-1]["id"]
    chained = await request_approval(client, runner, server)  # a request of a chain, in no conversation
    cases: list[tuple[str, list[dict[str, Any]], str]] = [
        (conversation, [approval("mcpr_unknown")], "items[0].approval_request_id"),
        (other, [approval(request_id)], "items[0].approval_request_id"),
        (conversation, [approval(chained["output"][1]["id"])], "items[0].approval_request_id"),
        (conversation, [approval(request_id), approval(request_id)], "items[1].approval_request_id"),
        (conversation, [{"type": "mcp_approval_response", "approve": True}], "items[0].approval_request_id"),
    ]
    for target, items, param in cases:
        assert_error(await add_items(client, target, *items), 400, param=param)
    listed = (await client.get(f"/v1/conversations/{conversation}/items")).json()["data"]
    assert "mcp_approval_response" not in [item["type"] for item in listed], "nothing half-written"
    assert (await client.get(f"/v1/conversations/{other}/items")).json()["data"] == []
    assert server.calls == []
