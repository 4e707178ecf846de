"""Forced calls of the real model cut off by max_output_tokens at each token from 16 to the whole call, through the
API in-process (the shipped model, SQLite), streamed and not: never our call markup as text; a call item once its
name is written, whole once its arguments are (the closing tag cut), else what they had so far."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.main import create_app
from app.testing.databases import sqlite_url
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

pytestmark = pytest.mark.integration

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 24}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
SQL = {
    "type": "custom",
    "name": "run_sql",
    "description": "Run one SQL query",
    "format": {"type": "grammar", "syntax": "regex", "definition": "SELECT [a-z*]{1,12} FROM [a-z]{1,12}"},
}
#: The API's least max_output_tokens: the call tag and the name are written by then.
FIRST_CUT = 16


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    # NOTE: one llama.cpp thread: on a machine shared with other tests, threads that spin-wait for each other
    # make decoding several times slower.
    settings = Settings(database_url=sqlite_url(tmp_path), n_threads=1, _env_file=None)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=300) as http:
            yield http


async def create(client: httpx.AsyncClient, body: dict[str, Any], stream: bool) -> dict[str, Any]:
    reply = await client.post("/v1/responses", json={**body, "stream": stream})
    assert reply.status_code == 200, reply.text
    if not stream:
        response: dict[str, Any] = reply.json()
        return response
    events = parse_sse(reply.text)
    assert not [event for event in events if event["type"] == "response.output_text.delta"], "streamed as text"
    return assert_well_formed_stream(events)


async def cut_calls(client: httpx.AsyncClient, tool: dict[str, Any], question: str) -> list[tuple[dict[str, Any], ...]]:
    """The whole call, then the call item of each cut from FIRST_CUT to the whole call's length, once in JSON and
    once streamed, after checking that the response is incomplete and has no text."""
    body = {"input": question, "tools": [tool], "tool_choice": "required", "temperature": 0}
    whole = await create(client, {**body, "max_output_tokens": 200}, stream=False)
    assert whole["status"] == "completed", whole
    (call,) = whole["output"]
    length = whole["usage"]["output_tokens"]
    cuts: list[tuple[dict[str, Any], ...]] = [(call,)]
    for cut in range(FIRST_CUT, length):
        responses = [await create(client, {**body, "max_output_tokens": cut}, stream) for stream in (False, True)]
        for response in responses:
            assert response["status"] == "incomplete", (cut, response)
            assert response["incomplete_details"] == {"reason": "max_output_tokens"}
            assert [item["type"] for item in response["output"]] == [call["type"]], (cut, response["output"])
            assert response["output"][0]["name"] == call["name"]
        plain, streamed = (response["output"][0] for response in responses)
        assert {key: plain[key] for key in ("arguments", "input", "status") if key in plain} == {
            key: streamed[key] for key in ("arguments", "input", "status") if key in streamed
        }, cut
        cuts.append(tuple(response["output"][0] for response in responses))
    return cuts


async def test_a_forced_function_call_cut_at_each_token(client: httpx.AsyncClient) -> None:
    (whole,), *cuts = await cut_calls(client, WEATHER, "What is the weather in Paris?")
    arguments = json.loads(whole["arguments"])
    statuses = []
    so_far = ""
    for call, _ in cuts:
        statuses.append(call["status"])
        if call["status"] == "completed":  # only the call's closing was cut
            assert json.loads(call["arguments"]) == arguments
        else:
            assert call["arguments"].startswith(so_far), "the arguments so far are not the start of the next cut's"
            so_far = call["arguments"]
    # Cut in the arguments, then after them (in the closing tag): each case was met.
    assert statuses == sorted(statuses, key=lambda status: status == "completed"), statuses
    assert "incomplete" in statuses and "completed" in statuses, statuses


async def test_a_forced_custom_call_cut_at_each_token(client: httpx.AsyncClient) -> None:
    (whole,), *cuts = await cut_calls(client, SQL, "List the names of all cities.")
    inputs = [call["input"] for call, _ in cuts]
    assert all(whole["input"].startswith(text) for text in inputs), inputs
    assert inputs == sorted(inputs, key=len), inputs
    # Cut in the input, then after it (in the closing tag): each case was met.
    assert inputs[0] != whole["input"] and inputs[-1] == whole["input"], inputs
