"""Function tools through the API layer, with a scripted model: calls parsed into items, streamed, chained."""

from __future__ import annotations

import json

import httpx
import pytest

from app.testing.fakes import FakeRenderer, FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def says(runner: FakeRunner, text: str) -> None:
    runner.reply = text.split(" ")


async def test_a_call_in_the_text_becomes_a_function_call_item(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    says(runner, f"Let me check. {CALL}")
    reply = await client.post("/v1/responses", json={"input": "Weather in Paris?", "tools": [WEATHER]})
    body = reply.json()
    assert body["status"] == "completed"
    message, call = body["output"]
    assert message["content"][0]["text"] == "Let me check. "
    assert call["type"] == "function_call" and call["name"] == "get_weather" and call["status"] == "completed"
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    assert call["id"].startswith("fc_") and call["call_id"].startswith("call_")
    assert body["tools"] == [{**WEATHER, "strict": False}], "echoed with strict a boolean"


async def test_function_calls_stream_as_the_sdk_expects(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    says(runner, CALL)
    reply = await client.post("/v1/responses", json={"input": "Weather?", "tools": [WEATHER], "stream": True})
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    kinds = [event["type"] for event in events]
    assert "response.output_text.delta" not in kinds, "the call tag leaked out as text"
    # The arguments stream as the model writes them: a delta for each piece of them (two words here).
    assert kinds[2:7] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    assert [item["type"] for item in final["output"]] == ["function_call"]


async def test_the_round_trip_shows_call_and_result_in_order(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer
) -> None:
    says(runner, CALL)
    first = (await client.post("/v1/responses", json={"input": "Weather?", "tools": [WEATHER]})).json()
    call = first["output"][0]
    says(runner, "It is sunny in Paris.")
    answer = {"type": "function_call_output", "call_id": call["call_id"], "output": '{"sky": "sunny"}'}
    second = await client.post(
        "/v1/responses", json={"input": [answer], "previous_response_id": first["id"], "tools": [WEATHER]}
    )
    assert second.status_code == 200, second.text
    assert second.json()["output"][0]["content"][0]["text"] == "It is sunny in Paris."
    seen = renderer.rendered[-1]
    assert seen[0].role == "system" and "get_weather" in seen[0].content
    assert [message.role for message in seen[1:]] == ["user", "assistant", "user"]
    assert "<tool_call>" in seen[2].content and '"city": "Paris"' in seen[2].content
    assert "<tool_response>" in seen[3].content and "sunny" in seen[3].content
    listed = (await client.get(f"/v1/responses/{second.json()['id']}/input_items")).json()
    assert listed["data"][0]["type"] == "function_call_output" and listed["data"][0]["call_id"] == call["call_id"]
    stateless = await client.post(
        "/v1/responses",
        json={"input": [{"role": "user", "content": "Weather?"}, {**call, "id": None}, answer], "tools": [WEATHER]},
    )
    assert stateless.status_code == 200, stateless.text


async def test_text_that_is_not_a_well_formed_call_stays_text(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    says(runner, '<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>')
    body = (await client.post("/v1/responses", json={"input": "x", "tools": [WEATHER]})).json()
    assert [item["type"] for item in body["output"]] == ["message"]
    assert "launch_rockets" in body["output"][0]["content"][0]["text"]


async def test_required_and_named_choices_force_a_call_with_a_grammar(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    for choice in ("required", {"type": "function", "name": "get_weather"}):
        reply = await client.post("/v1/responses", json={"input": "x", "tools": [WEATHER], "tool_choice": choice})
        assert reply.status_code == 200, reply.text
        grammar = runner.jobs[-1].sampling.grammar
        assert grammar is not None and grammar.startswith('root ::= "<tool_call>"')
    await client.post("/v1/responses", json={"input": "x", "tools": [WEATHER], "tool_choice": "none"})
    assert runner.jobs[-1].sampling.grammar is None and runner.jobs[-1].functions == {}


async def test_namespace_tools_put_their_namespace_on_the_call(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    says(runner, CALL)
    namespace = {"type": "namespace", "name": "weather", "description": "Weather tools", "tools": [WEATHER]}
    body = (await client.post("/v1/responses", json={"input": "x", "tools": [namespace]})).json()
    assert body["output"][0]["namespace"] == "weather"


async def test_hosted_tools_are_left_out_and_named_in_a_header(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    reply = await client.post("/v1/responses", json={"input": "x", "tools": [{"type": "web_search"}, WEATHER]})
    assert reply.status_code == 200
    assert reply.headers["x-llama-responses-ignored-tools"] == "web_search"
    assert list(runner.jobs[-1].functions) == ["get_weather"]


@pytest.mark.settings(strict_tools=True)
async def test_strict_tools_reject_hosted_tools(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/responses", json={"input": "x", "tools": [{"type": "web_search"}]})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "tools[0].type"


async def test_a_call_cut_before_its_name_is_neither_a_call_nor_text(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    says(runner, " ".join(["<tool_call>{"] + ["x"] * 30))
    body = (await client.post("/v1/responses", json={"input": "x", "tools": [WEATHER], "max_output_tokens": 16})).json()
    assert body["status"] == "incomplete" and [item["type"] for item in body["output"]] == ["message"]
    assert body["output"][0]["content"][0]["text"] == "", "the call markup reached the client"


SQL = {
    "type": "custom",
    "name": "run_sql",
    "description": "Run one SQL query",
    "format": {"type": "grammar", "syntax": "regex", "definition": "SELECT [a-z0-9 ,*]+"},
}


async def test_custom_tools_take_free_text_and_stream_it(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    says(runner, '<tool_call>{"name": "run_sql", "input": "SELECT 1"}</tool_call>')
    events = parse_sse((await client.post("/v1/responses", json={"input": "x", "tools": [SQL], "stream": True})).text)
    final = assert_well_formed_stream(events)
    (call,) = final["output"]
    assert call["type"] == "custom_tool_call" and call["name"] == "run_sql" and call["input"] == "SELECT 1"
    kinds = [event["type"] for event in events]
    assert "response.custom_tool_call_input.delta" in kinds and "response.custom_tool_call_input.done" in kinds
    says(runner, "One row.")
    answer = {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "1"}
    reply = await client.post(
        "/v1/responses", json={"input": [answer], "previous_response_id": final["id"], "tools": [SQL]}
    )
    assert reply.status_code == 200, reply.text


async def test_a_forced_custom_call_carries_its_regex_in_the_grammar(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    choice = {"type": "custom", "name": "run_sql"}
    reply = await client.post("/v1/responses", json={"input": "x", "tools": [SQL, WEATHER], "tool_choice": choice})
    assert reply.status_code == 200, reply.text
    grammar = runner.jobs[-1].sampling.grammar
    assert grammar is not None and '("SELECT" " " [a-z0-9 ,*]+)' in grammar and "get_weather" not in grammar
    assert runner.jobs[-1].custom_tools == ["run_sql"]


async def test_a_template_with_tool_support_gets_the_tools_itself(
    client: httpx.AsyncClient, renderer: FakeRenderer
) -> None:
    renderer.supports_tools = True
    await client.post("/v1/responses", json={"input": "x", "instructions": "Be brief.", "tools": [WEATHER]})
    options = renderer.template_options[-1]
    assert options is not None
    assert options["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER["description"],
                "parameters": WEATHER["parameters"],
            },
        }
    ]
    assert renderer.rendered[-1][0].content == "Be brief.", "the tools were also put in the system prompt"
