"""The openai SDK against the real server and model: create, stream, chain, page, delete, disconnect."""

from __future__ import annotations

import json
import re
import time

import httpx
import jsonschema
import openai
import pytest

from app.testing.servers import ServerProcess
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

pytestmark = pytest.mark.integration

QUESTION = "What is 2+2?"  # the shipped model answers this in about 11 tokens at temperature 0
STORY = "Write a long story about a dragon who learns to bake bread."


def test_create_then_retrieve(client: openai.OpenAI, model: str) -> None:
    response = client.responses.create(
        model=model, input=QUESTION, temperature=0, max_output_tokens=48, metadata={"case": "create"}
    )
    assert response.status in ("completed", "incomplete")
    assert response.output_text.strip(), "the model said nothing"
    assert response.usage is not None
    assert response.usage.input_tokens > 5 and response.usage.output_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert response.model == model and response.metadata == {"case": "create"}
    assert client.responses.retrieve(response.id).model_dump() == response.model_dump()


def test_max_output_tokens_ends_incomplete(client: openai.OpenAI, model: str) -> None:
    response = client.responses.create(model=model, input=STORY, temperature=0, max_output_tokens=16)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 16
    assert response.output_text


def test_stream_helper_and_wire_format(client: openai.OpenAI, model: str, server: ServerProcess) -> None:
    with client.responses.stream(model=model, input=QUESTION, temperature=0, max_output_tokens=64) as stream:
        # warnings=False: the helper puts Parsed* models where the union expects plain ones (an SDK quirk).
        events = [event.model_dump(warnings=False) for event in stream]
        final = stream.get_final_response()
    streamed = assert_well_formed_stream(events)
    assert streamed["id"] == final.id
    assert final.output_text == "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    retrieved = client.responses.retrieve(final.id)
    # The helper's final output items are Parsed* models (an extra `parsed` key): compare them by content.
    assert retrieved.model_dump(exclude={"output"}) == {k: v for k, v in streamed.items() if k != "output"}
    assert [item.id for item in retrieved.output] == [item["id"] for item in streamed["output"]]
    assert retrieved.output_text == final.output_text

    body = {"model": model, "input": QUESTION, "temperature": 0, "max_output_tokens": 16, "stream": True}
    raw = httpx.post(f"{server.base_url}/v1/responses", json=body, timeout=120)
    raw_final = assert_well_formed_stream(parse_sse(raw.text))
    assert httpx.get(f"{server.base_url}/v1/responses/{raw_final['id']}").json() == raw_final


def test_chain_sees_the_history_and_lists_only_its_own_input(client: openai.OpenAI, model: str) -> None:
    first = client.responses.create(
        model=model, input="My name is Ada.", instructions="Answer briefly.", temperature=0, max_output_tokens=24
    )
    second = client.responses.create(
        model=model, input="What is my name?", previous_response_id=first.id, temperature=0, max_output_tokens=24
    )
    assert first.usage is not None and second.usage is not None
    # The second prompt holds the first turn's input and output (not its instructions) plus the new question.
    assert second.usage.input_tokens > first.usage.output_tokens + 10
    assert second.instructions is None and second.previous_response_id == first.id
    items = client.responses.input_items.list(second.id)
    assert [item.content[0].text for item in items.data] == ["What is my name?"]
    third = client.responses.create(
        model=model, input="And again?", previous_response_id=second.id, temperature=0, max_output_tokens=16
    )
    assert third.usage is not None and third.usage.input_tokens > second.usage.input_tokens


def test_input_items_auto_pagination_walks_everything(client: openai.OpenAI, model: str) -> None:
    items = [{"role": "user", "content": f"n{index}"} for index in range(45)]
    response = client.responses.create(model=model, input=items, max_output_tokens=16)
    listed = list(client.responses.input_items.list(response.id, limit=10))
    assert [item.content[0].text for item in listed] == [f"n{index}" for index in reversed(range(45))]
    ascending = list(client.responses.input_items.list(response.id, limit=7, order="asc"))
    assert [item.id for item in ascending] == [item.id for item in reversed(listed)]


def test_delete_then_everything_is_gone(client: openai.OpenAI, model: str) -> None:
    response = client.responses.create(model=model, input=QUESTION, max_output_tokens=16)
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(response.id)
    with pytest.raises(openai.BadRequestError) as chained:
        client.responses.create(model=model, input="x", previous_response_id=response.id)
    assert chained.value.body["param"] == "previous_response_id"


def test_a_request_sees_the_writes_of_the_one_before(client: openai.OpenAI, model: str) -> None:
    # The response to a DELETE must not leave before its commit; a prompt next request once found the row.
    for _ in range(10):
        response = client.responses.create(model=model, input="Hi!", max_output_tokens=16)
        client.responses.delete(response.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(response.id)


def test_store_false_keeps_nothing(client: openai.OpenAI, model: str) -> None:
    response = client.responses.create(model=model, input=QUESTION, store=False, max_output_tokens=16)
    assert response.output_text and response.model_extra and response.model_extra["store"] is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_bad_input_is_a_clear_400_and_the_server_keeps_serving(client: openai.OpenAI, model: str) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model=model, input=QUESTION, temperature=3)
    assert error.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model=model, input="word " * 9000)
    assert error.value.body["code"] == "context_length_exceeded"
    truncated = client.responses.create(
        model=model,
        input=[
            {"role": "user", "content": "word " * 5000},
            {"role": "user", "content": "word " * 5000},
            {"role": "user", "content": "Say hi."},
        ],
        truncation="auto",
        max_output_tokens=16,
    )
    assert truncated.usage is not None and truncated.usage.input_tokens < 8192
    assert client.responses.create(model=model, input=QUESTION, max_output_tokens=16).output_text


def test_a_client_that_disconnects_stops_generation(client: openai.OpenAI, model: str, server: ServerProcess) -> None:
    body = {"model": model, "input": STORY, "stream": True, "max_output_tokens": 2000, "temperature": 0.8}
    response_id = None
    with httpx.stream("POST", f"{server.base_url}/v1/responses", json=body, timeout=120) as stream:
        for line in stream.iter_lines():
            if response_id is None and line.startswith("data: "):
                response_id = httpx.Response(200, content=line[6:]).json()["response"]["id"]
            if "response.output_text.delta" in line:
                break
    assert response_id is not None
    deadline = time.monotonic() + 30
    stored = client.responses.retrieve(response_id)
    while stored.status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.2)
        stored = client.responses.retrieve(response_id)
    assert stored.status == "cancelled", stored.status
    assert stored.usage is not None and stored.usage.output_tokens < 2000
    # The model is free again: the next request is answered at once.
    assert client.responses.create(model=model, input=QUESTION, max_output_tokens=16).output_text


def test_structured_outputs_always_parse_and_match(client: openai.OpenAI, model: str) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    response = client.responses.create(
        model=model,
        input="Give me a person as JSON with a name and an age.",
        text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}},
        max_output_tokens=200,
    )
    assert response.status == "completed", response.status
    jsonschema.validate(json.loads(response.output_text), schema)
    anything = client.responses.create(
        model=model,
        input="Describe a cat as JSON.",
        text={"format": {"type": "json_object"}},
        temperature=0,
        max_output_tokens=300,
    )
    if anything.status == "completed":
        assert isinstance(json.loads(anything.output_text), dict)
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(
            model=model, input="x", text={"format": {"type": "json_schema", "name": "x", "schema": {"type": 7}}}
        )
    assert error.value.body["param"] == "text.format.schema"


WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
    "strict": True,
}


def test_a_required_tool_call_matches_the_schema_and_round_trips(client: openai.OpenAI, model: str) -> None:
    call_turn = client.responses.create(
        model=model, input="What is the weather in Paris?", tools=[WEATHER_TOOL], tool_choice="required", temperature=0
    )
    assert call_turn.status == "completed"
    calls = [item for item in call_turn.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER_TOOL["parameters"])
    answer = client.responses.create(
        model=model,
        previous_response_id=call_turn.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"temperature": 21}'}],
        tools=[WEATHER_TOOL],
        tool_choice="none",
        max_output_tokens=64,
    )
    assert answer.status in ("completed", "incomplete") and answer.output_text
    assert answer.usage is not None and call_turn.usage is not None
    # The answer turn read the call (tools are not shown with tool_choice "none", so compare with the call).
    assert answer.usage.input_tokens > call_turn.usage.output_tokens + 10
    listed = list(client.responses.input_items.list(answer.id))
    assert [item.type for item in listed] == ["function_call_output"]


def test_tool_call_arguments_stream(client: openai.OpenAI, model: str) -> None:
    with client.responses.stream(
        model=model,
        input="Weather in Rome?",
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0,
    ) as stream:
        events = [event.model_dump(warnings=False) for event in stream]
        final = stream.get_final_response()
    assert_well_formed_stream(events)
    kinds = [event["type"] for event in events]
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    call = next(item for item in final.output if item.type == "function_call")
    jsonschema.validate(json.loads(call.arguments), WEATHER_TOOL["parameters"])


def test_a_forced_custom_tool_call_matches_its_regex(client: openai.OpenAI, model: str) -> None:
    tool = {
        "type": "custom",
        "name": "set_volume",
        "description": "Set the volume, 0 to 100.",
        "format": {"type": "grammar", "syntax": "regex", "definition": "[0-9]{1,2}|100"},
    }
    response = client.responses.create(
        model=model,
        input="Turn the volume to fifty.",
        tools=[tool],
        tool_choice={"type": "custom", "name": "set_volume"},
        temperature=0,
    )
    call = next(item for item in response.output if item.type == "custom_tool_call")
    assert re.fullmatch("[0-9]{1,2}|100", call.input), call.input
