"""Conversations, item references and compaction through the openai SDK, on the real model (embedded)."""

from __future__ import annotations

import base64
import itertools
import time

import openai
import pytest
from openai.types.responses.response_input_item_param import ItemReference

from tests.protocol import assert_well_formed_stream

pytestmark = pytest.mark.integration

QUESTIONS = ["Name a fruit.", "What colour is it?", "Where does it grow?"]
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _wait(client: openai.OpenAI, response_id: str) -> openai.types.responses.Response:
    deadline = time.monotonic() + 60
    response = client.responses.retrieve(response_id)
    while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.05)
        response = client.responses.retrieve(response_id)
    return response


def test_conversation_turns_reuse_the_prefix_as_chained_turns_do(client: openai.OpenAI, model: str) -> None:
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Let us talk about fruit."}], metadata={"case": "fruit"}
    )
    assert client.conversations.retrieve(conversation.id).metadata == {"case": "fruit"}
    common = {"model": model, "conversation": conversation.id, "temperature": 0, "max_output_tokens": 16}
    first = client.responses.create(input=QUESTIONS[0], **common)
    # The second turn streams, the third runs in the background: each is appended when it finishes.
    with client.responses.stream(input=QUESTIONS[1], **common) as stream:
        events = [event.model_dump(warnings=False) for event in stream]
    second = client.responses.retrieve(assert_well_formed_stream(events)["id"])
    third = _wait(client, client.responses.create(input=QUESTIONS[2], background=True, **common).id)
    turns = [first, second, third]
    assert all(turn.status in ("completed", "incomplete") for turn in turns)
    assert all(turn.conversation is not None and turn.conversation.id == conversation.id for turn in turns)
    for previous, turn in itertools.pairwise(turns):
        assert previous.usage is not None and turn.usage is not None
        # Like a chain: the previous prompt is reused whole, only its answer and the new question are read.
        assert turn.usage.input_tokens_details.cached_tokens >= previous.usage.input_tokens

    items = list(client.conversations.items.list(conversation.id, order="asc", limit=3))  # pages of 3
    assert [item.role for item in items] == ["user", *["user", "assistant"] * 3]
    assert [item.id for item in items[2::2]] == [turn.output[0].id for turn in turns]
    assert client.conversations.items.retrieve(items[1].id, conversation_id=conversation.id).id == items[1].id
    deleted = client.conversations.delete(conversation.id)
    assert deleted.deleted
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.list(conversation.id)
    assert client.responses.retrieve(first.id).id == first.id, "responses outlive their conversation"


def test_a_tool_call_chain_on_a_conversation(client: openai.OpenAI, model: str) -> None:
    conversation = client.conversations.create()
    call_turn = client.responses.create(
        model=model,
        input="What is the weather in Paris?",
        conversation=conversation.id,
        tools=[WEATHER_TOOL],
        tool_choice="required",
        temperature=0,
    )
    call = next(item for item in call_turn.output if item.type == "function_call")
    answer = client.responses.create(
        model=model,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature": 21}'}],
        conversation={"id": conversation.id},
        tools=[WEATHER_TOOL],
        temperature=0,
        max_output_tokens=16,
    )
    assert answer.status in ("completed", "incomplete")
    kinds = [item.type for item in client.conversations.items.list(conversation.id, order="asc")]
    assert kinds[:3] == ["message", "function_call", "function_call_output"]


def test_references_and_compaction(client: openai.OpenAI, model: str) -> None:
    first = client.responses.create(model=model, input="My name is Ada.", temperature=0, max_output_tokens=16)
    second = client.responses.create(
        model=model, input="I live in Paris.", previous_response_id=first.id, temperature=0, max_output_tokens=16
    )
    referenced = client.responses.create(
        model=model,
        input=[
            ItemReference(type="item_reference", id=str(first.output[0].id)),
            {"role": "user", "content": "Repeat your first answer."},
        ],
        temperature=0,
        max_output_tokens=16,
    )
    assert referenced.status in ("completed", "incomplete")
    with pytest.raises(openai.BadRequestError) as unknown:
        client.responses.create(model=model, input=[{"type": "item_reference", "id": "msg_nope"}])
    assert unknown.value.body["param"] == "input[0].id"

    compacted = client.responses.compact(model=model, previous_response_id=second.id)
    assert compacted.object == "response.compaction" and compacted.usage.output_tokens > 0
    *kept, item = compacted.output
    assert [message.content[0].text for message in kept] == ["My name is Ada.", "I live in Paris."]
    assert item.type == "compaction"
    # Sealed: the summary is neither in the token as text nor in its bytes once decoded. (Not `"Ada" not in` the
    # token: random-looking base64 spells any three letters now and then, and a CI run met "...mbAdas...".)
    assert "My name is Ada" not in item.encrypted_content
    assert b"Ada" not in base64.urlsafe_b64decode(item.encrypted_content)
    # warnings=False: the SDK types these user messages as output messages (see test_compaction.py).
    history = [entry.model_dump(exclude_none=True, warnings=False) for entry in compacted.output]
    later = client.responses.create(
        model=model, input=[*history, {"role": "user", "content": "What is my name?"}], max_output_tokens=16
    )
    assert later.status in ("completed", "incomplete")
    forged = {**history[-1], "encrypted_content": item.encrypted_content[:-8] + "AAAAAAA="}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=model, input=[forged, {"role": "user", "content": "Hi"}])
    assert refused.value.body["code"] == "invalid_encrypted_content"


def test_automatic_compaction_streams_its_item_first(client: openai.OpenAI, model: str) -> None:
    long_history = [
        {"role": "user", "content": "Tell me about apples."},
        {"role": "assistant", "content": "Apples are sweet fruit that grow on trees in cool climates. " * 16},
        {"role": "user", "content": "And pears?"},
    ]
    with client.responses.stream(
        model=model,
        input=long_history,
        context_management=[{"type": "compaction", "compact_threshold": 100}],
        temperature=0,
        max_output_tokens=16,
    ) as stream:
        events = [event.model_dump(warnings=False) for event in stream]
    final = client.responses.retrieve(assert_well_formed_stream(events)["id"])
    assert [item.type for item in final.output][:2] == ["compaction", "message"]
    # The compacted turn is cheaper to continue than the whole history would be.
    plain = client.responses.create(model=model, input=long_history, temperature=0, max_output_tokens=16)
    chained = client.responses.create(
        model=model, input="Thanks.", previous_response_id=final.id, temperature=0, max_output_tokens=16
    )
    assert chained.usage is not None and plain.usage is not None
    assert chained.usage.input_tokens < plain.usage.input_tokens
