"""Reasoning sections, with a scripted stand-in for a reasoning model (the shipped model has none)."""

from __future__ import annotations

import base64

import httpx
import pytest

from app.generation.chat.template import reasoning_variables
from app.generation.tokenizer import parse_reasoning_tags
from app.testing.fakes import FakeRenderer, FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

THINK = ("<think>", "</think>")


@pytest.fixture(autouse=True)
def reasoning_model(renderer: FakeRenderer, runner: FakeRunner) -> None:
    renderer.reasoning_tags = THINK
    runner.separator = ""
    # The tags arrive split across pieces, as a tokenizer would cut them.
    runner.reply = ["<th", "ink>", "Two plus", " two is four", ".</th", "ink>", "\n\n", "The answer", " is 4."]


async def test_the_reasoning_section_becomes_a_reasoning_item(client: httpx.AsyncClient) -> None:
    body = (await client.post("/v1/responses", json={"input": "2+2?", "reasoning": {"effort": "low"}})).json()
    reasoning, message = body["output"]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_")
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Two plus two is four."}]
    assert message["content"][0]["text"] == "The answer is 4."
    assert body["usage"]["output_tokens_details"]["reasoning_tokens"] == 5
    assert reasoning["encrypted_content"] is None


async def test_reasoning_streams_before_the_message(client: httpx.AsyncClient) -> None:
    events = parse_sse((await client.post("/v1/responses", json={"input": "2+2?", "stream": True})).text)
    final = assert_well_formed_stream(events)
    kinds = [event["type"] for event in events]
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "The answer is 4."
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert [e["output_index"] for e in events if e["type"] == "response.output_text.delta"] == [1, 1]


async def test_chained_turns_show_the_reasoning_again(client: httpx.AsyncClient, renderer: FakeRenderer) -> None:
    first = (await client.post("/v1/responses", json={"input": "2+2?"})).json()
    await client.post("/v1/responses", json={"input": "And 3+3?", "previous_response_id": first["id"]})
    assistant = renderer.rendered[-1][1]
    assert assistant.role == "assistant"
    assert assistant.content == "<think>Two plus two is four.</think>\nThe answer is 4."


async def test_stateless_clients_get_the_reasoning_back_to_resend(
    client: httpx.AsyncClient, renderer: FakeRenderer
) -> None:
    body = {"input": "2+2?", "store": False, "include": ["reasoning.encrypted_content"]}
    first = (await client.post("/v1/responses", json=body)).json()
    reasoning, message = first["output"]
    assert base64.b64decode(reasoning["encrypted_content"]).decode() == "Two plus two is four."
    history = [
        {"role": "user", "content": "2+2?"},
        {
            "type": "reasoning",
            "id": reasoning["id"],
            "summary": [],
            "encrypted_content": reasoning["encrypted_content"],
        },
        message,
        {"role": "user", "content": "And 3+3?"},
    ]
    reply = await client.post("/v1/responses", json={"input": history, "store": False})
    assert reply.status_code == 200, reply.text
    assert renderer.rendered[-1][1].content == "<think>Two plus two is four.</think>\nThe answer is 4."


async def test_the_effort_reaches_the_template(client: httpx.AsyncClient, renderer: FakeRenderer) -> None:
    await client.post("/v1/responses", json={"input": "x", "reasoning": {"effort": "high"}})
    assert renderer.template_options[-1] == reasoning_variables("high")


async def test_reasoning_cut_by_the_token_limit_is_incomplete(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    runner.reply = ["<think>", *["hmm "] * 30]
    body = (await client.post("/v1/responses", json={"input": "x", "max_output_tokens": 16})).json()
    assert body["status"] == "incomplete"
    assert body["output"][0]["type"] == "reasoning" and body["output"][0]["status"] == "incomplete"


async def test_a_model_without_reasoning_tags_keeps_them_as_text(
    client: httpx.AsyncClient, renderer: FakeRenderer
) -> None:
    renderer.reasoning_tags = None
    body = (await client.post("/v1/responses", json={"input": "x"})).json()
    assert [item["type"] for item in body["output"]] == ["message"]
    assert body["output"][0]["content"][0]["text"].startswith("<think>")


def test_reasoning_tags_come_from_the_setting_or_the_template() -> None:
    assert parse_reasoning_tags(None, "{{ '<think>' }}") == THINK
    assert parse_reasoning_tags(None, "{{ messages }}") is None
    assert parse_reasoning_tags("<r>,</r>", "") == ("<r>", "</r>")
    assert parse_reasoning_tags("none", "<think>") is None
    with pytest.raises(ValueError):
        parse_reasoning_tags("<r>", "")
