"""A `compaction_trigger` as the last input item, with the fake model: the context is compacted first (the
compaction item leads the output, `response.compaction.compacting` says so in the stream), then answered; the
trigger itself is no stored item; a trigger anywhere else is a 400 naming it."""

from __future__ import annotations

import httpx
import pytest
from openai.types.responses import Response, ResponseItem
from pydantic import TypeAdapter

from app.generation.prompt import SUMMARY_HEADING
from app.responses.compaction import COMPACTION_REQUEST
from app.testing.fakes import FAKE_REPLY, FakeRenderer, FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

SUMMARY = " ".join(FAKE_REPLY)
HISTORY = [
    {"role": "user", "content": "My name is Ada."},
    {"role": "assistant", "content": "Hello Ada."},
    {"role": "user", "content": "I like tea."},
]
TRIGGER = {"type": "compaction_trigger"}
RESPONSE_ITEM: TypeAdapter[ResponseItem] = TypeAdapter(ResponseItem)


async def test_a_trigger_compacts_then_answers(
    client: httpx.AsyncClient, renderer: FakeRenderer, runner: FakeRunner
) -> None:
    reply = await client.post("/v1/responses", json={"input": [*HISTORY, TRIGGER], "instructions": "Be brief."})
    assert reply.status_code == 200, reply.text
    response = Response.model_validate(reply.json())
    assert [item.type for item in response.output] == ["compaction", "message"]
    assert response.output[0].id.startswith("cmp_")
    # A small context all the same: the trigger compacts whatever the size (no context_management asked).
    assert renderer.rendered[-2][-1].content == COMPACTION_REQUEST
    assert [(message.role, message.content) for message in renderer.rendered[-1]] == [
        ("system", "Be brief."),
        ("user", "My name is Ada."),
        ("user", "I like tea."),
        ("user", f"{SUMMARY_HEADING}\n{SUMMARY}"),
    ]
    assert len(runner.jobs) == 2, "the summary, then the answer"
    assert (await client.get(f"/v1/responses/{response.id}")).json() == reply.json()
    # The trigger is no item (the SDK's ResponseItem has none such): the input items are the messages.
    listed = (await client.get(f"/v1/responses/{response.id}/input_items", params={"order": "asc"})).json()["data"]
    assert [item["content"][0]["text"] for item in listed] == [message["content"] for message in HISTORY]
    for item in listed:
        RESPONSE_ITEM.validate_python(item)


async def test_a_streamed_trigger_says_compacting(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/responses", json={"input": [*HISTORY, {**TRIGGER, "id": "ct_1"}], "stream": True})
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    Response.model_validate(final)
    compaction = final["output"][0]
    assert compaction["type"] == "compaction"
    kinds = [(event["type"], event.get("output_index")) for event in events]
    at = kinds.index(("response.compaction.compacting", 0))
    assert kinds[at - 1] == ("response.output_item.added", 0) and kinds[at + 1] == ("response.output_item.done", 0)
    assert events[at]["item_id"] == compaction["id"]
    assert [kind for kind, _ in kinds].count("response.compaction.compacting") == 1


async def test_automatic_compaction_says_no_compacting(client: httpx.AsyncClient) -> None:
    management = [{"type": "compaction", "compact_threshold": 12}]
    reply = await client.post(
        "/v1/responses",
        json={"input": HISTORY, "context_management": management, "stream": True, "instructions": "Be brief."},
    )
    events = parse_sse(reply.text)
    assert assert_well_formed_stream(events)["output"][0]["type"] == "compaction"
    assert "response.compaction.compacting" not in {event["type"] for event in events}


async def test_a_trigger_compacts_a_chain(client: httpx.AsyncClient, renderer: FakeRenderer) -> None:
    first = (await client.post("/v1/responses", json={"input": "My name is Ada."})).json()
    reply = await client.post("/v1/responses", json={"input": [TRIGGER], "previous_response_id": first["id"]})
    assert reply.status_code == 200, reply.text
    assert [item["type"] for item in reply.json()["output"]] == ["compaction", "message"]
    assert renderer.rendered[-2][-1].content == COMPACTION_REQUEST
    assert renderer.rendered[-2][0].content == "My name is Ada."
    assert (await client.get(f"/v1/responses/{reply.json()['id']}/input_items")).json()["data"] == []

    # The next turn reads the compacted context.
    later = await client.post("/v1/responses", json={"input": "And?", "previous_response_id": reply.json()["id"]})
    assert later.status_code == 200, later.text
    assert [message.content for message in renderer.rendered[-1]] == [
        "My name is Ada.",
        f"{SUMMARY_HEADING}\n{SUMMARY}",
        SUMMARY,
        "And?",
    ]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/responses", {"input": [TRIGGER, *HISTORY]}, "input[0]"),
        ("/v1/responses", {"input": [*HISTORY, TRIGGER, TRIGGER]}, "input[3]"),
        ("/v1/responses", {"input": [TRIGGER]}, "input"),
        ("/v1/responses", {"input": [*HISTORY, {**TRIGGER, "summary": "x"}]}, "input[3].summary"),
        ("/v1/responses", {"input": [*HISTORY, {**TRIGGER, "id": 7}]}, "input[3].id"),
        ("/v1/responses/compact", {"model": "fake-model", "input": [*HISTORY, TRIGGER]}, "input[3].type"),
        ("/v1/conversations", {"items": [TRIGGER]}, "items[0].type"),
    ],
)
async def test_a_misplaced_or_malformed_trigger_is_a_400(
    client: httpx.AsyncClient, runner: FakeRunner, path: str, body: dict[str, object], param: str
) -> None:
    reply = await client.post(path, json=body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param
    assert runner.jobs == [], "nothing generated"
    assert (await client.get("/v1/responses")).json()["data"] == []
