"""item_reference with the fake model: stored input, output and conversation items stand in for their id,
and an unknown, deleted or another tenant's id is a 400 naming input[i].id."""

from __future__ import annotations

import httpx

from app.testing.fakes import FAKE_REPLY, FakeRenderer


async def test_references_resolve_to_input_output_and_conversation_items(
    client: httpx.AsyncClient, renderer: FakeRenderer
) -> None:
    first = (await client.post("/v1/responses", json={"input": "Remember the number 7."})).json()
    input_id = (await client.get(f"/v1/responses/{first['id']}/input_items")).json()["data"][0]["id"]
    output_id = first["output"][0]["id"]
    conversation = (
        await client.post("/v1/conversations", json={"items": [{"role": "user", "content": "From the conversation."}]})
    ).json()
    conversation_item = (await client.get(f"/v1/conversations/{conversation['id']}/items")).json()["data"][0]["id"]

    body = {
        "input": [
            {"type": "item_reference", "id": input_id},
            {"id": output_id},  # the SDK's ItemReference may leave out its type
            {"type": "item_reference", "id": conversation_item},
            {"role": "user", "content": "Which number?"},
        ]
    }
    second = await client.post("/v1/responses", json=body)
    assert second.status_code == 200, second.text
    assert [(message.role, message.content) for message in renderer.rendered[-1]] == [
        ("user", "Remember the number 7."),
        ("assistant", " ".join(FAKE_REPLY)),
        ("user", "From the conversation."),
        ("user", "Which number?"),
    ]
    # The response's input items are the items themselves, ids kept.
    listed = (await client.get(f"/v1/responses/{second.json()['id']}/input_items", params={"order": "asc"})).json()
    assert [item["id"] for item in listed["data"]][:3] == [input_id, output_id, conversation_item]
    assert listed["data"][1]["role"] == "assistant"


async def test_references_to_gone_items_are_a_400(client: httpx.AsyncClient) -> None:
    first = (await client.post("/v1/responses", json={"input": "x", "store": True})).json()
    output_id = first["output"][0]["id"]
    assert (await client.delete(f"/v1/responses/{first['id']}")).status_code == 200
    for reference in ({"type": "item_reference", "id": output_id}, {"type": "item_reference", "id": "msg_never"}):
        reply = await client.post("/v1/responses", json={"input": [{"role": "user", "content": "hi"}, reference]})
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["param"] == "input[1].id" and error["code"] == "item_not_found"

    conversation = (await client.post("/v1/conversations", json={"items": [{"role": "user", "content": "x"}]})).json()
    item_id = (await client.get(f"/v1/conversations/{conversation['id']}/items")).json()["data"][0]["id"]
    await client.delete(f"/v1/conversations/{conversation['id']}/items/{item_id}")
    reply = await client.post("/v1/responses", json={"input": [{"type": "item_reference", "id": item_id}]})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "input[0].id"


async def test_unstored_responses_leave_nothing_to_reference(client: httpx.AsyncClient) -> None:
    unstored = (await client.post("/v1/responses", json={"input": "x", "store": False})).json()
    reply = await client.post(
        "/v1/responses", json={"input": [{"type": "item_reference", "id": unstored["output"][0]["id"]}]}
    )
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "item_not_found"
