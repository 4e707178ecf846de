"""What a context's items decide beside the prompt, with the fake model: `configuration_update` items (the
reasoning effort of this and later turns, stored and listed as the SDK types them, never shown to the model) and
`input_transformations` (the reasoning items the model did not read, and why)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openai.types.conversations import ConversationItem
from openai.types.responses import Response, ResponseItem
from pydantic import TypeAdapter

from app.generation.chat.template import reasoning_variables
from app.testing.fakes import FakeRenderer
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

RESPONSE_ITEM: TypeAdapter[ResponseItem] = TypeAdapter(ResponseItem)
CONVERSATION_ITEM: TypeAdapter[ConversationItem] = TypeAdapter(ConversationItem)


def update(effort: str | None) -> dict[str, Any]:
    return {"type": "configuration_update", "reasoning": {"effort": effort}}


async def create(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    reply = await client.post("/v1/responses", json=body)
    assert reply.status_code == 200, reply.text
    Response.model_validate(reply.json())
    result: dict[str, Any] = reply.json()
    return result


async def test_a_configuration_update_sets_the_effort_of_later_turns(
    client: httpx.AsyncClient, renderer: FakeRenderer
) -> None:
    first = await create(client, input=[update("low"), {"role": "user", "content": "Hi."}])
    assert first["reasoning"]["effort"] == "low"
    assert renderer.template_options[-1] == reasoning_variables("low")
    assert [message.content for message in renderer.rendered[-1]] == ["Hi."], "no message for the model"
    listed = (await client.get(f"/v1/responses/{first['id']}/input_items", params={"order": "asc"})).json()["data"]
    assert listed[0]["type"] == "configuration_update" and listed[0]["id"].startswith("cfg_")
    assert listed[0]["reasoning"] == {"effort": "low"}
    assert RESPONSE_ITEM.validate_python(listed[0]).type == "configuration_update"

    # A later turn of the chain keeps it, without saying it again.
    second = await create(client, input="More.", previous_response_id=first["id"])
    assert second["reasoning"]["effort"] == "low" and renderer.template_options[-1] == reasoning_variables("low")
    # The request's own effort wins over the chain's update.
    own = await create(client, input="More.", previous_response_id=second["id"], reasoning={"effort": "high"})
    assert own["reasoning"] == {"effort": "high"} and renderer.template_options[-1] == reasoning_variables("high")
    # A newer update replaces it; `effort: null` goes back to the default.
    third = await create(
        client, input=[update("medium"), {"role": "user", "content": "Go."}], previous_response_id=own["id"]
    )
    assert third["reasoning"]["effort"] == "medium"
    reset = await create(
        client, input=[update(None), {"role": "user", "content": "Go."}], previous_response_id=third["id"]
    )
    assert reset["reasoning"] is None and renderer.template_options[-1] is None


async def test_a_configuration_update_in_a_conversation(client: httpx.AsyncClient, renderer: FakeRenderer) -> None:
    conversation = (await client.post("/v1/conversations", json={"items": [update("minimal")]})).json()
    items = (await client.get(f"/v1/conversations/{conversation['id']}/items")).json()["data"]
    assert CONVERSATION_ITEM.validate_python(items[0]).type == "configuration_update"
    answer = await create(client, input="Hi.", conversation=conversation["id"])
    assert answer["reasoning"]["effort"] == "minimal" and renderer.template_options[-1] == reasoning_variables(
        "minimal"
    )


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"type": "configuration_update", "reasoning": {"effort": "huge"}}, "input[0].reasoning.effort"),
        ({"type": "configuration_update", "text": {"format": {"type": "json_object"}}}, "input[0].text"),
        ({"type": "configuration_update", "reasoning": {"summary": "auto"}}, "input[0].reasoning.summary"),
        ({"type": "configuration_update", "reasoning": "low"}, "input[0].reasoning"),
    ],
)
async def test_a_malformed_configuration_update_is_a_400(
    client: httpx.AsyncClient, item: dict[str, Any], param: str
) -> None:
    reply = await client.post("/v1/responses", json={"input": [item, {"role": "user", "content": "Hi."}]})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param
    assert (await client.get("/v1/responses")).json()["data"] == []


REASONING = {
    "type": "reasoning",
    "id": "rs_earlier",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "Hmm."}],
}
TURN = [
    {"role": "user", "content": "Hi."},
    REASONING,
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Bye."},
]


async def test_reasoning_a_model_cannot_read_is_named(client: httpx.AsyncClient, renderer: FakeRenderer) -> None:
    reply = await client.post("/v1/responses", json={"input": TURN, "stream": True})
    final = assert_well_formed_stream(parse_sse(reply.text))
    expected = [{"id": "rs_earlier", "action": "removed", "reason": "model_mismatch", "type": "reasoning"}]
    assert final["input_transformations"] == expected
    assert Response.model_validate(final).input_transformations is not None
    assert "Hmm." not in " ".join(message.content for message in renderer.rendered[-1])
    assert (await client.get(f"/v1/responses/{final['id']}")).json()["input_transformations"] == expected
    # Earlier turns count too: a chained turn names the reasoning of its history.
    later = await create(client, input="Again.", previous_response_id=final["id"])
    assert later["input_transformations"] == expected


async def test_reasoning_the_model_reads_is_not_named(client: httpx.AsyncClient, renderer: FakeRenderer) -> None:
    assert (await create(client, input="Hi."))["input_transformations"] is None
    renderer.reasoning_tags = ("<think>", "</think>")
    answer = await create(client, input=TURN)
    assert answer["input_transformations"] is None
    assert "<think>Hmm.</think>" in " ".join(message.content for message in renderer.rendered[-1])
