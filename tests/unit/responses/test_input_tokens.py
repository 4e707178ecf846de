"""POST /v1/responses/input_tokens counts exactly what a create with the same body reports, and generates nothing."""

from __future__ import annotations

import httpx
import pytest
from openai.types.responses import InputTokenCountResponse

from app.testing.fakes import FakeRenderer, FakeRunner
from tests.protocol import assert_error

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}


async def count(client: httpx.AsyncClient, **body: object) -> int:
    reply = await client.post("/v1/responses/input_tokens", json=body)
    assert reply.status_code == 200, reply.text
    parsed = InputTokenCountResponse.model_validate(reply.json())
    assert set(reply.json()) == {"object", "input_tokens"} and parsed.object == "response.input_tokens"
    return parsed.input_tokens


async def created_input_tokens(client: httpx.AsyncClient, **body: object) -> tuple[str, int]:
    reply = await client.post("/v1/responses", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()["id"], reply.json()["usage"]["input_tokens"]


@pytest.mark.parametrize(
    "body",
    [
        {"input": "hello there"},
        {"input": "hello", "instructions": "Be brief."},
        {"input": [{"role": "developer", "content": "rules"}, {"role": "user", "content": "hi"}]},
        {"input": "weather?", "tools": [WEATHER]},
        {"input": "weather?", "tools": [WEATHER], "tool_choice": "none"},
        {"input": "think", "reasoning": {"effort": "low"}, "text": {"verbosity": "low"}},
    ],
)
async def test_the_count_is_what_create_reports(client: httpx.AsyncClient, runner: FakeRunner, body: dict) -> None:
    counted = await count(client, **body)
    jobs_before = len(runner.jobs)
    _, reported = await created_input_tokens(client, **body)
    assert counted == reported
    assert len(runner.jobs) == jobs_before + 1, "counting started a generation"


async def test_chains_and_truncation_count_as_create_does(client: httpx.AsyncClient, renderer: FakeRenderer) -> None:
    first, _ = await created_input_tokens(client, input="my name is Ada", instructions="terse")
    second, _ = await created_input_tokens(client, input="and yours?", previous_response_id=first)
    counted = await count(client, input="what is my name?", previous_response_id=second)
    _, reported = await created_input_tokens(client, input="what is my name?", previous_response_id=second)
    assert counted == reported
    # Without input, a chain counts its own context.
    assert await count(client, previous_response_id=second) < counted
    renderer.n_ctx = 40
    long = [{"role": "user", "content": "word " * 10} for _ in range(4)]
    truncated = await count(client, input=long, truncation="auto")
    assert truncated + 16 <= 40
    assert truncated == (await created_input_tokens(client, input=long, truncation="auto", max_output_tokens=16))[1]


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({}, 400, "input", "invalid_value"),
        (
            {"input": "x", "previous_response_id": "resp_nope"},
            400,
            "previous_response_id",
            "previous_response_not_found",
        ),
        ({"input": "x", "model": "other-model"}, 400, "model", "model_not_found"),
        ({"input": "x", "personality": "friendly"}, 400, "personality", "unsupported_parameter"),
        ({"input": "x", "tool_choice": "required"}, 400, "tool_choice", "invalid_value"),
        ({"input": [{"role": "robot", "content": "x"}]}, 400, "input[0].role", "invalid_value"),
    ],
)
async def test_bad_input_is_the_same_400_as_create(
    client: httpx.AsyncClient, body: dict, status: int, param: str, code: str
) -> None:
    assert_error(await client.post("/v1/responses/input_tokens", json=body), status, param=param, code=code)


async def test_a_context_too_long_is_a_400_and_create_only_fields_are_ignored(
    client: httpx.AsyncClient, renderer: FakeRenderer
) -> None:
    renderer.n_ctx = 20
    reply = await client.post("/v1/responses/input_tokens", json={"input": "word " * 30})
    assert_error(reply, 400, param="input", code="context_length_exceeded")
    # Create-only fields (not in the SDK's InputTokenCountParams) do not change the count.
    assert await count(client, input="hi", max_output_tokens=16, stream=True, store=False) == await count(
        client, input="hi"
    )


@pytest.mark.settings(strict_params=True)
async def test_strict_mode_rejects_fields_the_count_does_not_take(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/responses/input_tokens", json={"input": "hi", "temperature": 0.2})
    assert_error(reply, 400, param="temperature", code="unknown_parameter")


@pytest.mark.settings(api_keys=["k1", "k2"])
async def test_counting_a_chain_needs_its_owner(client: httpx.AsyncClient) -> None:
    owner = {"authorization": "Bearer k1"}
    created = await client.post("/v1/responses", json={"input": "secret"}, headers=owner)
    body = {"input": "x", "previous_response_id": created.json()["id"]}
    assert (await client.post("/v1/responses/input_tokens", json=body, headers=owner)).status_code == 200
    other = await client.post("/v1/responses/input_tokens", json=body, headers={"authorization": "Bearer k2"})
    assert_error(other, 400, param="previous_response_id", code="previous_response_not_found")
    assert (await client.post("/v1/responses/input_tokens", json=body)).status_code == 401


def schema_format(schema: dict) -> dict:
    return {"format": {"type": "json_schema", "name": "t", "schema": schema}}


@pytest.mark.parametrize(
    "body",
    [
        {"input": "x", "text": schema_format({"type": 5})},
        {"input": "x", "text": schema_format({"type": "string", "maxLength": 1_000_000})},
        {"input": "x", "text": schema_format({"type": "array", "items": {"type": "string", "pattern": "a{0,99999}"}})},
    ],
)
async def test_an_output_format_create_refuses_is_the_same_400_here(
    client: httpx.AsyncClient, runner: FakeRunner, body: dict
) -> None:
    created = await client.post("/v1/responses", json=body)
    assert_error(created, 400, param="text.format.schema")
    counted = await client.post("/v1/responses/input_tokens", json=body)
    assert counted.status_code == 400 and counted.json() == created.json()
    assert not runner.jobs


async def test_a_grammar_llama_cpp_refuses_is_a_400_here_too(client: httpx.AsyncClient, renderer: FakeRenderer) -> None:
    renderer.grammars_build = False
    body = {"input": "x", "text": schema_format({"type": "string"})}
    reply = await client.post("/v1/responses/input_tokens", json=body)
    assert_error(reply, 400, param="text.format.schema", code="invalid_json_schema")
