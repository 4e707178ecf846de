"""Every Response is exactly the SDK's: every declared field present, the SDK's enum values accepted, the
penalties accepted and echoed, parallel_tool_calls honoured, and `include` on reads honest."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from app.testing.fakes import FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_error, assert_exact_response, assert_well_formed_stream

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


def call(city: str) -> str:
    return '<tool_call>{"name": "get_weather", "arguments": {"city": "%s"}}</tool_call>' % city  # noqa: UP031


async def create(client: httpx.AsyncClient, **body: object) -> dict:
    reply = await client.post("/v1/responses", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


async def test_every_declared_field_is_present_on_create_stream_and_get(client: httpx.AsyncClient) -> None:
    created = await create(client, input="hello", tools=[WEATHER])
    assert_exact_response(created)
    assert created["presence_penalty"] == 0 and created["frequency_penalty"] == 0
    assert created["text"] == {"format": {"type": "text"}, "verbosity": "medium"}
    assert created["tools"][0]["strict"] is False
    assert created["output"][0]["content"][0]["logprobs"] == []
    assert_exact_response((await client.get(f"/v1/responses/{created['id']}")).json())
    streamed = await client.post("/v1/responses", json={"input": "hello", "stream": True})
    events = parse_sse(streamed.text)
    assert_well_formed_stream(events)  # checks the final Response exactly too
    assert all(event["logprobs"] == [] for event in events if event["type"] == "response.output_text.delta")


async def test_penalties_are_accepted_echoed_and_reach_the_sampler(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    created = await create(client, input="hello", presence_penalty=0.5, frequency_penalty=-1.25)
    assert created["presence_penalty"] == 0.5 and created["frequency_penalty"] == -1.25
    sampling = runner.jobs[-1].sampling
    assert sampling.presence_penalty == 0.5 and sampling.frequency_penalty == -1.25
    assert (await client.get(f"/v1/responses/{created['id']}")).json()["presence_penalty"] == 0.5
    for field in ("presence_penalty", "frequency_penalty"):
        for bad in (2.5, -2.01, "lots"):
            reply = await client.post("/v1/responses", json={"input": "x", field: bad})
            assert_error(reply, 400, param=field, code="invalid_value")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("service_tier", "fast"),
        ("service_tier", "ultrafast"),
        ("service_tier", "flex"),
        ("reasoning", {"effort": "none"}),
        ("reasoning", {"effort": "minimal"}),
        ("reasoning", {"effort": "max"}),
        ("prompt_cache_retention", "24h"),
        ("text", {"verbosity": "low"}),
        ("include", ["reasoning.encrypted_content", "message.output_text.logprobs", "web_search_call.results"]),
        ("stream_options", {"include_obfuscation": False}),
    ],
)
async def test_the_sdks_current_values_are_accepted(client: httpx.AsyncClient, field: str, value: object) -> None:
    created = await create(client, input="hello", **{field: value})
    assert_exact_response(created)
    if field in ("prompt_cache_retention", "reasoning"):
        assert created[field] == value
    if field == "text":
        assert created["text"] == {"format": {"type": "text"}, "verbosity": "low"}


async def test_values_outside_the_sdks_enums_are_a_400_naming_them(client: httpx.AsyncClient) -> None:
    for field, value in [
        ("service_tier", "turbo"),
        ("prompt_cache_retention", "forever"),
        ("text", {"verbosity": "chatty"}),
        ("include", ["message.output_text.everything"]),
    ]:
        reply = await client.post("/v1/responses", json={"input": "x", field: value})
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["param"].startswith(field) and error["code"] == "invalid_value", error


async def test_parallel_tool_calls_false_yields_at_most_one_call(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    runner.reply = [call("Paris"), call("Rome")]
    both = await create(client, input="Weather?", tools=[WEATHER])
    assert [json.loads(item["arguments"])["city"] for item in both["output"]] == ["Paris", "Rome"]
    one = await create(client, input="Weather?", tools=[WEATHER], parallel_tool_calls=False)
    assert [json.loads(item["arguments"])["city"] for item in one["output"]] == ["Paris"]
    assert one["parallel_tool_calls"] is False
    streamed = await client.post(
        "/v1/responses", json={"input": "Weather?", "tools": [WEATHER], "parallel_tool_calls": False, "stream": True}
    )
    final = assert_well_formed_stream(parse_sse(streamed.text))
    assert len(final["output"]) == 1


async def test_function_tools_echo_strict_as_a_boolean(client: httpx.AsyncClient) -> None:
    namespace = {"type": "namespace", "name": "weather", "description": "Weather", "tools": [{**WEATHER, "name": "w2"}]}
    strict = {**WEATHER, "name": "strict_one", "strict": True}
    created = await create(client, input="hello", tools=[WEATHER, strict, namespace])
    assert [tool.get("strict") for tool in created["tools"][:2]] == [False, True]
    assert created["tools"][2]["tools"][0]["strict"] is False
    assert_exact_response(created)


async def test_get_include_adds_what_it_can_and_rejects_what_the_api_does_not_define(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_given",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "hm"}],
    }
    created = await create(client, input=[reasoning, {"role": "user", "content": "hi"}])
    plain = (await client.get(f"/v1/responses/{created['id']}")).json()
    included = await client.get(
        f"/v1/responses/{created['id']}",
        params={"include[]": ["message.output_text.logprobs", "file_search_call.results"]},
    )
    assert included.status_code == 200
    # Logprobs were not computed at create: a read cannot invent them, and says none rather than null.
    assert included.json() == plain and plain["output"][0]["content"][0]["logprobs"] == []
    bad = await client.get(f"/v1/responses/{created['id']}", params={"include": "everything"})
    assert_error(bad, 400, param="include", code="invalid_value")
    listed = await client.get(
        f"/v1/responses/{created['id']}/input_items",
        params={"include": "reasoning.encrypted_content", "order": "asc"},
    )
    item = listed.json()["data"][0]
    assert base64.b64decode(item["encrypted_content"]).decode() == "hm"
    bad_list = await client.get(f"/v1/responses/{created['id']}/input_items", params={"include[]": "nope"})
    assert_error(bad_list, 400, param="include", code="invalid_value")
