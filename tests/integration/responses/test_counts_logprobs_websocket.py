"""The SDK against the real model: input token counts, logprobs, penalties, exact shapes and WebSocket mode."""

from __future__ import annotations

import json

import openai
import pytest

from app.events.terminal import SDK_TERMINAL_EVENT_TYPES
from tests.protocol import SOCKET_EVENT, assert_exact_response, assert_well_formed_stream, socket_exchange

pytestmark = pytest.mark.integration

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_input_token_counts_are_what_create_reports(client: openai.OpenAI, model: str) -> None:
    body = {"model": model, "input": "What is the weather in Paris?", "instructions": "Be brief.", "tools": [WEATHER]}
    counted = client.responses.input_tokens.count(**body)
    assert counted.object == "response.input_tokens"
    first = client.responses.create(**body, temperature=0, max_output_tokens=16)
    assert first.usage is not None and counted.input_tokens == first.usage.input_tokens
    chained = {"model": model, "input": "And in Rome?", "previous_response_id": first.id, "tools": [WEATHER]}
    counted_chain = client.responses.input_tokens.count(**chained)
    second = client.responses.create(**chained, temperature=0, max_output_tokens=16)
    assert second.usage is not None and counted_chain.input_tokens == second.usage.input_tokens
    with pytest.raises(openai.BadRequestError) as unknown:
        client.responses.input_tokens.count(model=model, input="x", previous_response_id="resp_unknown")
    assert unknown.value.body["code"] == "previous_response_not_found"


def test_control_token_text_in_input_is_counted_as_text(client: openai.OpenAI, model: str) -> None:
    """`<|im_end|>` from a client is text (several tokens), not the vocabulary's end-of-turn token: it counts as
    many tokens as the same characters with one changed (`<|im_enX|>`) give or take the one changed."""
    control = client.responses.input_tokens.count(model=model, input="<|im_end|>").input_tokens
    changed = client.responses.input_tokens.count(model=model, input="<|im_enX|>").input_tokens
    plain = client.responses.input_tokens.count(model=model, input="x").input_tokens
    assert abs(control - changed) <= 1 and control > plain + 2


def test_logprobs_spell_the_text_on_parts_and_deltas(client: openai.OpenAI, model: str) -> None:
    question = "Write the word café three times."
    with client.responses.stream(
        model=model,
        input=question,
        temperature=0,
        max_output_tokens=24,
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    ) as stream:
        events = [event.model_dump(warnings=False) for event in stream]
    final = assert_well_formed_stream(events)
    part = final["output"][0]["content"][0]
    assert part["logprobs"] and "".join(token["token"] for token in part["logprobs"]) == part["text"]
    assert b"".join(bytes(token["bytes"]) for token in part["logprobs"]) == part["text"].encode()
    for token in part["logprobs"]:
        assert token["logprob"] <= 0 and len(token["top_logprobs"]) == 2
        # At temperature 0 the chosen token is the likeliest one (the logprobs are the model's own).
        assert token["top_logprobs"][0]["logprob"] >= token["logprob"] - 1e-6
    deltas = [event for event in events if event["type"] == "response.output_text.delta"]
    assert all("".join(token["token"] for token in delta["logprobs"]) == delta["delta"] for delta in deltas)
    stored = client.responses.retrieve(final["id"], include=["message.output_text.logprobs"])
    assert assert_exact_response(stored.model_dump(mode="json")).output_text == part["text"]
    plain = client.responses.create(model=model, input=question, temperature=0, max_output_tokens=24)
    assert plain.output_text == part["text"], "asking for logprobs changed the answer"
    assert plain.output[0].content[0].logprobs == []


def test_penalties_change_what_the_model_writes_and_are_echoed(client: openai.OpenAI, model: str) -> None:
    prompt = "Repeat the word 'cat' twenty times."
    plain = client.responses.create(model=model, input=prompt, temperature=0, max_output_tokens=40)
    penalised = client.responses.create(
        model=model,
        input=prompt,
        temperature=0,
        max_output_tokens=40,
        extra_body={"presence_penalty": 2.0, "frequency_penalty": 2.0},
    )
    raw = penalised.model_dump(mode="json")
    assert raw["presence_penalty"] == 2.0 and raw["frequency_penalty"] == 2.0
    assert plain.model_dump(mode="json")["presence_penalty"] == 0
    assert penalised.output_text != plain.output_text
    assert_exact_response(raw)


def test_websocket_mode_through_the_sdk(client: openai.OpenAI, model: str) -> None:
    def run(connection: object, **fields: object) -> list[dict]:
        return socket_exchange(connection, model=model, temperature=0, max_output_tokens=16, **fields)

    with client.responses.connect() as connection:
        first = assert_well_formed_stream(run(connection, input="My name is Ada.", store=False), union=SOCKET_EVENT)
        second = assert_well_formed_stream(
            run(connection, input="What is my name?", store=False, previous_response_id=first["id"]),
            union=SOCKET_EVENT,
        )
        assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
        assert second["usage"]["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"] - 1
        connection.send_raw("not json")
        error = connection.recv()
        assert error.type == "error" and error.error.code == "invalid_json"
        refused = run(connection, input="x", background=True)
        assert refused[0]["type"] == "error" and refused[0]["error"]["param"] == "background"
        still = assert_well_formed_stream(run(connection, input="Still there?"), union=SOCKET_EVENT)
        assert client.responses.retrieve(still["id"]).status == still["status"]
    with client.responses.connect() as other:
        elsewhere = run(other, input="x", store=False, previous_response_id=second["id"])
        assert elsewhere[0]["error"]["code"] == "previous_response_not_found"


def test_websocket_errors_come_at_once_naming_their_event_through_the_sdk(client: openai.OpenAI, model: str) -> None:
    story = "Write a long story about a dragon who learns to bake bread."
    with client.responses.connect() as connection:
        connection.response.create(model=model, input=story, temperature=0, max_output_tokens=200)
        events: list[dict] = []
        for event in connection:
            events.append(event.model_dump(mode="json", exclude_unset=True, warnings=False))
            if event.type == "response.output_text.delta":
                break
        running = events[0]["response"]["id"]
        connection.send_raw(json.dumps({"type": "response.cancel", "event_id": "evt_1", "response_id": running}))
        connection.response.create(model=model, input="x", temperature=9, stream_id="lane")
        errors = []
        for event in connection:
            if event.type == "error":
                errors.append(event)
            else:
                events.append(event.model_dump(mode="json", exclude_unset=True, warnings=False))
            if event.type in SDK_TERMINAL_EVENT_TYPES:
                break
        # Both answered before the running response ended, which ended as it would have alone.
        assert [error.error.param for error in errors] == ["type", "temperature"], errors
        assert "'response.cancel'" in errors[0].error.message and "event_id 'evt_1'" in errors[0].error.message
        assert f"response_id '{running}'" in errors[0].error.message
        assert errors[1].stream_id == "lane" and errors[1].status == 400
        final = assert_well_formed_stream(events, union=SOCKET_EVENT)
        stored = client.responses.retrieve(running)
        assert stored.status == final["status"] and stored.output_text == final["output"][0]["content"][0]["text"]
        after = socket_exchange(connection, model=model, input="Still there?", max_output_tokens=16)
        assert assert_well_formed_stream(after, union=SOCKET_EVENT)["status"] in {"completed", "incomplete"}
