"""The `mcp` tool through the API, on the fake model against a real MCP server on loopback: listing, filtering,
a tool loop inside one response, its limits and failures, and what is never echoed or stored."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.generation.prompt import ChatMessage, ToolCall
from app.testing.fakes import FakeRenderer, FakeRunner
from app.testing.mcp_server import ToolServer, closed_port_url, plain_http_server, tool_server
from app.testing.sse import parse_sse
from tests.protocol import assert_error, assert_well_formed_stream

pytestmark = pytest.mark.settings(outbound_allowed_hosts="127.0.0.1:*")

ADD = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
SLOW = '<tool_call>{"name": "slow", "arguments": {}}</tool_call>'


@pytest.fixture
async def server() -> AsyncIterator[ToolServer]:
    async with tool_server() as running:
        yield running


def mcp_tool(server: ToolServer, **fields: object) -> dict[str, object]:
    return {"type": "mcp", "server_label": "calc", "server_url": server.url, "require_approval": "never", **fields}


def rounds(runner: FakeRunner, *texts: str) -> None:
    runner.replies = [text.split(" ") for text in texts]


def continuation(runner: FakeRunner, index: int) -> str:
    """What round `index` added to the prompt of round `index - 1`, as the fake renderer reads its prompts (a line
    a message)."""
    renderer = runner.prompt_renderer
    assert isinstance(renderer, FakeRenderer)
    before, after = renderer.read(runner.jobs[index - 1].prompt_tokens), renderer.read(runner.jobs[index].prompt_tokens)
    assert after.startswith(before), "a round continues the prompt of the last"
    return after[len(before) :]


async def test_a_call_s_output_reaches_the_response_in_one_stream(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer, server: ToolServer
) -> None:
    rounds(runner, ADD, "The sum is 5.")
    reply = await client.post("/v1/responses", json={"input": "2 + 3?", "tools": [mcp_tool(server)], "stream": True})
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert final["status"] == "completed"
    listing, call, message = final["output"]
    assert listing["type"] == "mcp_list_tools" and listing["server_label"] == "calc" and listing["error"] is None
    assert {tool["name"] for tool in listing["tools"]} == {"add", "echo", "slow", "broken"}
    assert call["type"] == "mcp_call" and call["name"] == "add" and call["status"] == "completed"
    assert json.loads(call["arguments"]) == {"a": 2, "b": 3} and call["output"] == "5" and call["error"] is None
    assert message["content"][0]["text"] == "The sum is 5."
    assert server.calls == [("add", {"a": 2, "b": 3})]
    kinds = [event["type"] for event in events]
    for kind in (
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
    ):
        assert kind in kinds, kind
    # The model read the tools, then its own call and the result, in the template's turns.
    assert '"name": "add"' in renderer.rendered[-1][0].content
    assert len(runner.jobs) == 2
    assert continuation(runner, 1) == f"assistant: {ADD}\nuser: <tool_response>\n5\n</tool_response>\n"
    usage = final["usage"]
    assert usage["input_tokens"] == len(runner.jobs[0].prompt_tokens) + len(runner.jobs[1].prompt_tokens)
    stored = (await client.get(f"/v1/responses/{final['id']}")).json()
    assert [item["type"] for item in stored["output"]] == ["mcp_list_tools", "mcp_call", "message"]


async def test_allowed_tools_filters_what_is_listed_and_offered(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer, server: ToolServer
) -> None:
    rounds(runner, "No tools needed.")
    tool = mcp_tool(server, allowed_tools=["add"])
    body = (await client.post("/v1/responses", json={"input": "hi", "tools": [tool]})).json()
    assert [tool["name"] for tool in body["output"][0]["tools"]] == ["add"]
    system = renderer.rendered[-1][0].content
    assert '"name": "add"' in system and '"name": "echo"' not in system
    filtered = mcp_tool(server, allowed_tools={"tool_names": ["echo", "slow"]})
    body = (await client.post("/v1/responses", json={"input": "hi", "tools": [filtered]})).json()
    assert sorted(tool["name"] for tool in body["output"][0]["tools"]) == ["echo", "slow"]


async def test_a_chained_turn_reuses_the_listing(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer, server: ToolServer
) -> None:
    rounds(runner, ADD, "5.", "And again: 5.")
    first = (await client.post("/v1/responses", json={"input": "2 + 3?", "tools": [mcp_tool(server)]})).json()
    requests_before = len(server.headers)
    second = (
        await client.post(
            "/v1/responses",
            json={"input": "Again?", "tools": [mcp_tool(server)], "previous_response_id": first["id"]},
        )
    ).json()
    assert second["status"] == "completed"
    assert [item["type"] for item in second["output"]] == ["message"], "no second listing"
    assert len(server.headers) == requests_before, "the server was not asked again"
    system, *conversation = renderer.rendered[-1]
    assert '"name": "add"' in system.content, "the reused tools are still offered"
    texts = [message.content for message in conversation]
    assert any("<tool_response>\n5\n</tool_response>" in text for text in texts), "the call is in the history"


async def test_max_tool_calls_is_enforced(client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer) -> None:
    rounds(runner, ADD, ADD, "never said")
    body = (
        await client.post(
            "/v1/responses", json={"input": "add twice", "tools": [mcp_tool(server)], "max_tool_calls": 1}
        )
    ).json()
    assert body["status"] == "completed"
    calls = [item for item in body["output"] if item["type"] == "mcp_call"]
    assert [call["status"] for call in calls] == ["completed", "failed"]
    assert "max_tool_calls" in calls[1]["error"]["message"]
    assert server.calls == [("add", {"a": 2, "b": 3})], "the second call was not made"
    assert len(runner.jobs) == 2, "the model was not asked again"


async def test_a_server_that_is_down_fails_the_listing_and_the_response(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    tool = {"type": "mcp", "server_label": "gone", "server_url": closed_port_url(), "require_approval": "never"}
    reply = await client.post("/v1/responses", json={"input": "hi", "tools": [tool], "stream": True})
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert final["status"] == "failed"
    assert "gone" in final["error"]["message"] and "tool list" in final["error"]["message"]
    (listing,) = final["output"]
    assert listing["type"] == "mcp_list_tools" and listing["error"] and listing["tools"] == []
    assert "response.mcp_list_tools.failed" in [event["type"] for event in events]
    assert runner.jobs == [], "the model never ran"


async def test_an_sse_only_server_is_listed_and_called(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    rounds(runner, ADD, "5.")
    async with tool_server("sse") as sse:
        tool = {"type": "mcp", "server_label": "old", "server_url": sse.url, "require_approval": "never"}
        reply = await client.post("/v1/responses", json={"input": "2 + 3?", "tools": [tool], "stream": True})
    final = assert_well_formed_stream(parse_sse(reply.text))
    assert final["status"] == "completed"
    listing, call, _ = final["output"]
    assert listing["error"] is None and {tool["name"] for tool in listing["tools"]} >= {"add"}
    assert call["status"] == "completed" and call["output"] == "5"
    assert sse.calls == [("add", {"a": 2, "b": 3})]


async def test_a_server_that_speaks_neither_transport_fails_the_listing(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    async with plain_http_server() as plain:
        tool = {"type": "mcp", "server_label": "web", "server_url": plain.url, "require_approval": "never"}
        reply = await client.post("/v1/responses", json={"input": "hi", "tools": [tool]})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["status"] == "failed" and "neither MCP transport" in body["error"]["message"]
    (listing,) = body["output"]
    assert listing["type"] == "mcp_list_tools" and "neither MCP transport" in listing["error"]
    assert runner.jobs == [], "the model never ran"


async def test_a_template_that_renders_calls_reads_the_round_as_a_call_and_a_tool_message(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer, server: ToolServer
) -> None:
    """The next round's prompt is the conversation rendered again with the round's items: for a template that
    renders calls, the call in `tool_calls` (the item's id) and its result as a `tool` message."""
    renderer.structured = renderer.supports_tools = True
    rounds(runner, ADD, "The sum is 5.")
    final = (await client.post("/v1/responses", json={"input": "2 + 3?", "tools": [mcp_tool(server)]})).json()
    assert final["status"] == "completed", final["error"]
    call = final["output"][1]
    *_, assistant, result = renderer.prompts[tuple(runner.jobs[1].prompt_tokens)]
    assert assistant == ChatMessage("assistant", "", (ToolCall(call["id"], "add", call["arguments"]),))
    assert result == ChatMessage("tool", "5", tool_call_id=call["id"], name="add")


@pytest.mark.settings(outbound_allowed_hosts="127.0.0.1:*", mcp_call_timeout_s=0.5)
async def test_a_hanging_tool_fails_its_call_and_the_model_goes_on(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    rounds(runner, SLOW, "It timed out.")
    started = time.monotonic()
    body = (await client.post("/v1/responses", json={"input": "slow", "tools": [mcp_tool(server)]})).json()
    # The tool hangs 30 s: the response did not wait for it (a loose bound: a loaded machine takes seconds).
    assert time.monotonic() - started < 25
    assert body["status"] == "completed"
    call = body["output"][1]
    assert call["status"] == "failed" and "0.5 s" in call["error"]["message"] and call["output"] is None
    assert "Error: " in continuation(runner, 1)
    assert body["output"][2]["content"][0]["text"] == "It timed out."


async def test_a_tool_error_is_the_call_s_error(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    rounds(runner, '<tool_call>{"name": "broken", "arguments": {}}</tool_call>', "Sorry.")
    body = (await client.post("/v1/responses", json={"input": "x", "tools": [mcp_tool(server)]})).json()
    call = body["output"][1]
    assert call["status"] == "failed" and call["error"]["type"] == "mcp_tool_execution_error"
    assert "broken" in json.dumps(call["error"])


async def test_headers_reach_the_server_but_are_never_echoed_nor_stored(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer, settings: Settings
) -> None:
    rounds(runner, ADD, "5.")
    tool = mcp_tool(server, headers={"Authorization": "Bearer sekrit-token-1"}, authorization="sekrit-oauth-2")
    reply = await client.post("/v1/responses", json={"input": "2 + 3?", "tools": [tool], "stream": True})
    assert "sekrit" not in reply.text
    final = assert_well_formed_stream(parse_sse(reply.text))
    assert final["tools"][0]["headers"] == {"Authorization": "<redacted>"}
    assert final["tools"][0]["authorization"] == "<redacted>"
    stored = await client.get(f"/v1/responses/{final['id']}")
    assert "sekrit" not in stored.text
    # The listing and the call (made in the job, from the sealed headers) both carried them.
    assert {request.get("authorization") for request in server.headers} == {"Bearer sekrit-oauth-2"}
    database = Path(settings.database_url.split("///", 1)[1])
    for path in database.parent.glob(database.name + "*"):
        assert b"sekrit" not in path.read_bytes(), path


async def test_a_forced_mcp_call_uses_a_grammar_once(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    rounds(runner, ADD, "5.")
    choice = {"type": "mcp", "server_label": "calc", "name": "add"}
    body = (
        await client.post("/v1/responses", json={"input": "x", "tools": [mcp_tool(server)], "tool_choice": choice})
    ).json()
    assert body["status"] == "completed" and body["tool_choice"] == choice
    first, second = runner.jobs
    assert first.sampling.grammar is not None and "arguments-a-kv" in first.sampling.grammar
    assert second.sampling.grammar is None, "the answer after the call is free"
    rounds(runner, ADD, "5.")
    required = await client.post(
        "/v1/responses", json={"input": "x", "tools": [mcp_tool(server)], "tool_choice": "required"}
    )
    assert required.status_code == 200, required.text
    assert [item["type"] for item in required.json()["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert runner.jobs[2].sampling.grammar is not None and runner.jobs[3].sampling.grammar is None


async def test_cancel_stops_the_loop_during_a_call(
    client: httpx.AsyncClient, runner: FakeRunner, server: ToolServer
) -> None:
    rounds(runner, SLOW, "never said")
    created = (
        await client.post("/v1/responses", json={"input": "slow", "tools": [mcp_tool(server)], "background": True})
    ).json()
    deadline = time.monotonic() + 10
    while ("slow", {}) not in server.calls:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    cancelled = await client.post(f"/v1/responses/{created['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    while (body := (await client.get(f"/v1/responses/{created['id']}")).json())["status"] in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    assert body["status"] == "cancelled"
    assert len(runner.jobs) == 1, "no round after the cancel"
    call = body["output"][1]
    assert call["type"] == "mcp_call" and call["status"] == "failed" and call["output"] is None
    assert "Cancelled" in call["error"]["message"]
    # The call was aborted: its session closed (DELETE), which stopped the tool on the server.
    assert server.methods[-1] == "DELETE"
    while server.interrupted == 0:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    assert server.calls.count(("slow", {})) == 1


@pytest.mark.parametrize(
    ("tool", "param", "code"),
    [
        ({"server_url": "http://10.0.0.1/mcp"}, "tools[0].server_url", "invalid_url"),
        ({"server_url": "ftp://127.0.0.1/mcp"}, "tools[0].server_url", "invalid_url"),
        ({"server_url": None}, "tools[0].server_url", "missing_required_parameter"),
        ({"connector_id": "connector_gmail"}, "tools[0].connector_id", "unsupported_parameter"),
        ({"server_label": "no spaces"}, "tools[0].server_label", None),
    ],
)
async def test_bad_mcp_tools_are_400s(
    client: httpx.AsyncClient, server: ToolServer, tool: dict[str, object], param: str, code: str | None
) -> None:
    reply = await client.post("/v1/responses", json={"input": "x", "tools": [mcp_tool(server, **tool)]})
    assert_error(reply, 400, param=param, code=code)


async def test_bad_mcp_choices_and_duplicates_are_400s(client: httpx.AsyncClient, server: ToolServer) -> None:
    tools = [mcp_tool(server)]
    for choice, param in [
        ({"type": "mcp", "server_label": "other"}, "tool_choice.server_label"),
        ({"type": "mcp", "server_label": "calc", "name": "nope"}, "tool_choice.name"),
    ]:
        reply = await client.post("/v1/responses", json={"input": "x", "tools": tools, "tool_choice": choice})
        assert_error(reply, 400, param=param)
    reply = await client.post("/v1/responses", json={"input": "x", "tools": [*tools, *tools]})
    assert_error(reply, 400, param="tools[1].server_label")


async def test_an_address_outside_the_allowed_hosts_is_refused(client: httpx.AsyncClient, server: ToolServer) -> None:
    reply = await client.post(
        "/v1/responses", json={"input": "x", "tools": [mcp_tool(server, server_url="http://192.168.1.1:9/mcp")]}
    )
    assert_error(reply, 400, param="tools[0].server_url", code="invalid_url")
