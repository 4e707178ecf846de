"""Calls cut off by max_output_tokens, through the API with a scripted model that writes one character a token:
never our call markup as text; a call item once its name is read, whole when its arguments are, else (a function
call) `incomplete`; streamed well formed."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from app.testing.fakes import FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
SQL = {"type": "custom", "name": "run_sql"}
ARGUMENTS = '{"city": "Paris"}'
CALL = f'<tool_call>{{"name": "get_weather", "arguments": {ARGUMENTS}}}</tool_call>'
CUSTOM_CALL = '<tool_call>{"name": "run_sql", "input": "SELECT 1"}</tool_call>'
#: Empty pieces first: max_output_tokens is at least 16, and a cut must be able to fall on any character.
PADDING = 16


def script(runner: FakeRunner, text: str) -> None:
    runner.separator = ""
    runner.reply = [""] * PADDING + list(text)


async def create(client: httpx.AsyncClient, body: dict[str, Any], stream: bool) -> dict[str, Any]:
    reply = await client.post("/v1/responses", json={"input": "x", **body, "stream": stream})
    assert reply.status_code == 200, reply.text
    if not stream:
        response: dict[str, Any] = reply.json()
        return response
    events = parse_sse(reply.text)
    deltas = "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta")
    assert "<" not in deltas, "call markup streamed as text"
    return assert_well_formed_stream(events)


def texts(response: dict[str, Any]) -> str:
    return "".join(part["text"] for item in response["output"] if item["type"] == "message" for part in item["content"])


def cuts(call: str, payload: str) -> dict[str, int]:
    """Where to cut `call`: in each part of its markup, and around its payload (the arguments, the input)."""
    payload_from = call.index(payload)
    return {
        "inside the call tag": 5,
        "after the call tag": len("<tool_call>"),
        "inside the name": call.index('", "') - 2,
        "after the name": call.index('", "') + 1,
        "at the payload's start": payload_from,
        "inside the payload": payload_from + 4,
        "before the payload's last character": payload_from + len(payload) - 1,
        "after the payload": payload_from + len(payload),
        "inside the closing tag": len(call) - 4,
    }


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_forced_function_call_cut_anywhere(client: httpx.AsyncClient, runner: FakeRunner, stream: bool) -> None:
    name_read = CALL.index('", "') + 1
    for where, cut in cuts(CALL, ARGUMENTS).items():
        script(runner, CALL)
        body = {"tools": [WEATHER], "tool_choice": "required", "max_output_tokens": PADDING + cut}
        response = await create(client, body, stream)
        assert response["status"] == "incomplete", where
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}, where
        assert texts(response) == "", where
        calls = [item for item in response["output"] if item["type"] == "function_call"]
        if cut < name_read:
            assert calls == [], where
            continue
        (call,) = calls
        assert call["name"] == "get_weather", where
        if cut >= CALL.index(ARGUMENTS) + len(ARGUMENTS):
            assert call["status"] == "completed" and json.loads(call["arguments"]) == {"city": "Paris"}, where
        else:
            arguments_from = CALL.index(ARGUMENTS)
            assert call["status"] == "incomplete", where
            assert call["arguments"] == (CALL[arguments_from:cut] if cut > arguments_from else ""), where
    script(runner, CALL)
    whole = await create(client, {"tools": [WEATHER], "tool_choice": "required"}, stream)
    assert whole["status"] == "completed" and whole["output"][0]["status"] == "completed"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_forced_custom_call_cut_anywhere(client: httpx.AsyncClient, runner: FakeRunner, stream: bool) -> None:
    name_read = CUSTOM_CALL.index('", "') + 1
    for where, cut in cuts(CUSTOM_CALL, '"SELECT 1"').items():
        script(runner, CUSTOM_CALL)
        body = {"tools": [SQL], "tool_choice": "required", "max_output_tokens": PADDING + cut}
        response = await create(client, body, stream)
        assert response["status"] == "incomplete" and texts(response) == "", where
        calls = [item for item in response["output"] if item["type"] == "custom_tool_call"]
        if cut < name_read:
            assert calls == [], where
            continue
        (call,) = calls
        assert call["name"] == "run_sql" and "SELECT 1".startswith(call["input"]), where
        assert (call["input"] == "SELECT 1") == (cut >= CUSTOM_CALL.index('"}')), where


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_text_before_a_cut_call_stays_and_the_markup_goes(
    client: httpx.AsyncClient, runner: FakeRunner, stream: bool
) -> None:
    said = f"Let me check. {CALL}"
    for cut, items in [(len("Let me check. <tool_c"), ["message"]), (said.index("Par"), ["message", "function_call"])]:
        script(runner, said)
        response = await create(client, {"tools": [WEATHER], "max_output_tokens": PADDING + cut}, stream)
        assert response["status"] == "incomplete"
        assert [item["type"] for item in response["output"]] == items
        assert texts(response) == "Let me check. "
