"""Gemma 3 270M (the `gemma3` architecture, sliding-window attention, a 262k vocabulary, a base model without a chat
template) through the whole API, embedded and distributed: every route answers as it does for SmolLM2, never a
500, and the load says which template it chose."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from app.testing.sse import parse_sse
from tests.integration.gemma3.conftest import MODEL, Deployment
from tests.protocol import SOCKET_EVENT, assert_well_formed_stream, socket_exchange

pytestmark = pytest.mark.integration

TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
SHORT: dict[str, Any] = {"model": MODEL, "temperature": 0, "max_output_tokens": 16}


def _wait(client: openai.OpenAI, response_id: str, timeout_s: float = 120) -> Any:
    deadline = time.monotonic() + timeout_s
    response = client.responses.retrieve(response_id)
    while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.1)
        response = client.responses.retrieve(response_id)
    return response


def test_the_load_warns_of_the_missing_template_and_logs_the_memory(gemma: Deployment) -> None:
    gemma.client.responses.create(input="Hi", **SHORT)  # the model is loaded by now, in every mode
    log = gemma.log_text()
    assert f"model {MODEL} has no chat template in its GGUF" in log and "gemma default" in log
    assert f"model {MODEL}: weights" in log and "window 512 in 15 of 18 layers, window-sized cache" in log


def test_create_stream_and_retrieve(gemma: Deployment) -> None:
    client = gemma.client
    created = client.responses.create(input="Name a fruit.", **SHORT)
    assert created.status in ("completed", "incomplete") and created.usage is not None
    assert created.usage.output_tokens > 0
    assert client.responses.retrieve(created.id).model_dump() == created.model_dump()
    with client.responses.stream(input="Name a colour.", **SHORT) as stream:
        events = [event.model_dump(warnings=False) for event in stream]
    final = assert_well_formed_stream(events)
    assert client.responses.retrieve(final["id"]).model_dump(mode="json")["output"] == final["output"]


def test_background_resume_and_cancel(gemma: Deployment) -> None:
    client = gemma.client
    body = {**SHORT, "input": "Count from one to ten.", "background": True, "stream": True}
    with httpx.stream("POST", f"{gemma.api.base_url}/v1/responses", json=body, timeout=300) as stream:
        seen = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: {")]
    final = assert_well_formed_stream(seen)
    # The stream again from after its fifth event: the rest of it, as stored.
    rest = parse_sse(
        httpx.get(
            f"{gemma.api.base_url}/v1/responses/{final['id']}",
            params={"stream": "true", "starting_after": 4},
            timeout=60,
        ).text
    )
    assert rest == seen[5:]
    running = client.responses.create(
        background=True, model=MODEL, input="Write a long story about a dragon.", max_output_tokens=3000, temperature=1
    )
    deadline = time.monotonic() + 120
    while client.responses.retrieve(running.id).status == "queued" and time.monotonic() < deadline:
        time.sleep(0.05)
    cancelled = client.responses.cancel(running.id)
    assert cancelled.status == "cancelled", cancelled.status
    assert _wait(client, running.id).status == "cancelled"


def test_chains_and_the_prompt_cache(gemma: Deployment) -> None:
    client = gemma.client
    first = client.responses.create(input="My name is Ada.", prompt_cache_key="ada", **SHORT)
    second = client.responses.create(
        input="What is my name?",
        previous_response_id=first.id,
        prompt_cache_key="ada",
        prompt_cache_options={"comparison_response_id": first.id},  # type: ignore[call-arg]
        **SHORT,
    )
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens
    cached = second.usage.input_tokens_details.cached_tokens
    # The chain's earlier turn is reused (it is well within the window): at least its prompt.
    assert cached >= first.usage.input_tokens - 1, (cached, first.usage)
    assert second.prompt_cache_diagnostics is not None
    assert second.prompt_cache_diagnostics.model_dump(exclude_none=True) == {"type": "cache_hit"}
    items = list(client.responses.input_items.list(second.id))
    assert [item.type for item in items] == ["message"]


def test_conversations_and_compaction(gemma: Deployment) -> None:
    client = gemma.client
    conversation = client.conversations.create()
    for text in ("I like plums.", "What do I like?"):
        turn = client.responses.create(input=text, conversation=conversation.id, **SHORT)
        assert turn.status in ("completed", "incomplete")
    listed = list(client.conversations.items.list(conversation.id))
    assert len(listed) >= 4
    with client.responses.stream(
        input=[{"type": "compaction_trigger"}],  # type: ignore[list-item]
        previous_response_id=turn.id,
        **SHORT,
    ) as stream:
        events = [event.model_dump(warnings=False) for event in stream]
    final = assert_well_formed_stream(events)
    assert [item["type"] for item in final["output"]][:2] == ["compaction", "message"]
    later = client.responses.create(input="And now?", previous_response_id=final["id"], **SHORT)
    assert later.status in ("completed", "incomplete")


def test_websocket_mode(gemma: Deployment) -> None:
    client = gemma.client
    with client.responses.connect() as connection:
        first = assert_well_formed_stream(
            socket_exchange(connection, input="My name is Ada.", store=False, **SHORT), union=SOCKET_EVENT
        )
        second = assert_well_formed_stream(
            socket_exchange(connection, input="My name?", store=False, previous_response_id=first["id"], **SHORT),
            union=SOCKET_EVENT,
        )
        assert second["usage"]["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"] - 1
        warmed = socket_exchange(connection, input="Hello there.", generate=False, model=MODEL)
        assert warmed[-1]["type"] == "response.completed"


def test_structured_output_and_forced_tools(gemma: Deployment) -> None:
    client = gemma.client
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    person = client.responses.create(
        model=MODEL,
        input="A person as JSON.",
        text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}},
        temperature=0,
        max_output_tokens=60,
    )
    assert person.status == "completed", person.status
    jsonschema.validate(json.loads(person.output_text), schema)
    for choice in ("required", {"type": "function", "name": "get_weather"}):
        called = client.responses.create(
            model=MODEL,
            input="Weather in Paris?",
            tools=[TOOL],  # type: ignore[list-item]
            tool_choice=choice,  # type: ignore[arg-type]
            temperature=0,
            max_output_tokens=60,
        )
        calls = [item for item in called.output if item.type == "function_call"]
        assert len(calls) >= 1 and calls[0].name == "get_weather", called.output
        jsonschema.validate(json.loads(calls[0].arguments), TOOL["parameters"])
    answer = client.responses.create(
        previous_response_id=called.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"celsius": 21}'}],
        **SHORT,
    )
    assert answer.status in ("completed", "incomplete")


def test_bad_input_is_a_400_never_a_500(gemma: Deployment) -> None:
    client = gemma.client
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model=MODEL, input="word " * 5000)
    assert error.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="x", temperature=3)
