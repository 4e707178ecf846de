"""Conversations with the fake model: CRUD and paging in the SDK's shapes, responses that run on a
conversation (context in, turn appended in order, locked while one runs), tenants, and bad input."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from openai.types.conversations import Conversation, ConversationDeletedResource, ConversationItem
from openai.types.responses import Response
from pydantic import TypeAdapter

from app.conversations import turns
from app.jobs import repository as jobs
from app.jobs.recovery import end_response, release_unfinished_responses
from app.main import release_unstored_turns
from app.runtime import Runtime
from app.testing.fakes import FAKE_REPLY, FakeRenderer, FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_error, assert_well_formed_stream
from tests.unit.responses.test_background import poll_until_done

CONVERSATION_ITEM = TypeAdapter(ConversationItem)


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": text}


async def create(client: httpx.AsyncClient, **body: object) -> dict:
    reply = await client.post("/v1/conversations", json=body)
    assert reply.status_code == 200, reply.text
    Conversation.model_validate(reply.json())
    return reply.json()


async def items_of(client: httpx.AsyncClient, conversation_id: str) -> list[dict]:
    page = (
        await client.get(f"/v1/conversations/{conversation_id}/items", params={"order": "asc", "limit": 100})
    ).json()
    for item in page["data"]:
        CONVERSATION_ITEM.validate_python(item)
    return page["data"]


def texts(items: list[dict]) -> list[str]:
    return ["".join(part.get("text", "") for part in item["content"]) for item in items if item["type"] == "message"]


async def test_crud_in_the_sdk_shapes(client: httpx.AsyncClient) -> None:
    made = await create(client, items=[user("one"), user("two")], metadata={"topic": "tests"})
    assert (
        made["object"] == "conversation" and made["id"].startswith("conv_") and made["metadata"] == {"topic": "tests"}
    )
    assert (await client.get(f"/v1/conversations/{made['id']}")).json() == made
    updated = (await client.post(f"/v1/conversations/{made['id']}", json={"metadata": {"topic": "new"}})).json()
    assert updated["metadata"] == {"topic": "new"} and updated["id"] == made["id"]
    assert texts(await items_of(client, made["id"])) == ["one", "two"]

    added = (await client.post(f"/v1/conversations/{made['id']}/items", json={"items": [user("three")]})).json()
    assert added["object"] == "list" and texts(added["data"]) == ["three"]
    item_id = added["data"][0]["id"]
    one = (await client.get(f"/v1/conversations/{made['id']}/items/{item_id}")).json()
    assert one == added["data"][0]
    CONVERSATION_ITEM.validate_python(one)
    after_delete = (await client.delete(f"/v1/conversations/{made['id']}/items/{item_id}")).json()
    assert Conversation.model_validate(after_delete).id == made["id"]
    assert (await client.get(f"/v1/conversations/{made['id']}/items/{item_id}")).status_code == 404
    assert texts(await items_of(client, made["id"])) == ["one", "two"]

    deleted = (await client.delete(f"/v1/conversations/{made['id']}")).json()
    assert ConversationDeletedResource.model_validate(deleted).deleted is True
    assert deleted["object"] == "conversation.deleted"
    for reply in (
        await client.get(f"/v1/conversations/{made['id']}"),
        await client.get(f"/v1/conversations/{made['id']}/items"),
        await client.delete(f"/v1/conversations/{made['id']}"),
        await client.post(f"/v1/conversations/{made['id']}/items", json={"items": [user("x")]}),
    ):
        assert reply.status_code == 404 and reply.json()["error"]["type"] == "invalid_request_error"


async def test_an_empty_body_makes_an_empty_conversation(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/conversations")
    assert reply.status_code == 200 and reply.json()["metadata"] == {}


@pytest.mark.settings(strict_params=True)
async def test_strict_mode_names_unknown_fields(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/conversations", json={"items": [], "colour": "red"})
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "unknown_parameter"
    assert reply.json()["error"]["param"] == "colour"


async def test_items_page_like_input_items(client: httpx.AsyncClient) -> None:
    made = await create(client, items=[user(f"item {index}") for index in range(7)])
    ids = [item["id"] for item in await items_of(client, made["id"])]
    for order, expected in (("asc", ids), ("desc", ids[::-1])):
        seen: list[str] = []
        after: str | None = None
        while True:
            params: dict[str, str | int] = {"order": order, "limit": 3}
            if after:
                params["after"] = after
            page = (await client.get(f"/v1/conversations/{made['id']}/items", params=params)).json()
            seen += [item["id"] for item in page["data"]]
            assert page["first_id"] == page["data"][0]["id"] and page["last_id"] == page["data"][-1]["id"]
            if not page["has_more"]:
                break
            after = page["last_id"]
        assert seen == expected
    default = (await client.get(f"/v1/conversations/{made['id']}/items")).json()
    assert [item["id"] for item in default["data"]] == ids[::-1], "default order is desc"
    empty = await create(client)
    assert (await client.get(f"/v1/conversations/{empty['id']}/items")).json()["data"] == []


@pytest.mark.parametrize(
    ("method", "path", "body", "params", "param"),
    [
        ("post", "", {"items": [user("x")] * 21}, {}, "items"),
        ("post", "", {"metadata": {f"k{i}": "v" for i in range(17)}}, {}, "metadata"),
        ("post", "", {"items": [{"role": "robot", "content": "x"}]}, {}, "items[0].role"),
        ("post", "/{id}/items", {"items": []}, {}, "items"),
        ("post", "/{id}/items", {"items": [user("x")] * 21}, {}, "items"),
        ("post", "/{id}/items", {"items": [{"type": "item_reference", "id": "msg_nope"}]}, {}, "items[0].id"),
        ("post", "/{id}/items", {"items": [{"type": "compaction", "encrypted_content": "x"}]}, {}, None),
        ("post", "/{id}", {}, {}, "metadata"),
        ("get", "/{id}/items", None, {"limit": 0}, "limit"),
        ("get", "/{id}/items", None, {"order": "up"}, "order"),
        ("get", "/{id}/items", None, {"after": "msg_nope"}, "after"),
        ("get", "/{id}/items", None, {"include": "nonsense"}, "include"),
    ],
)
async def test_bad_input_is_a_400(
    client: httpx.AsyncClient, method: str, path: str, body: dict | None, params: dict, param: str | None
) -> None:
    made = await create(client, items=[user("x")])
    url = "/v1/conversations" + path.format(id=made["id"])
    reply = await client.request(method, url, json=body, params=params)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param, error
    else:
        assert error["param"].endswith("encrypted_content"), error


async def test_a_response_reads_the_conversation_and_appends_its_turn(
    client: httpx.AsyncClient, renderer: FakeRenderer
) -> None:
    made = await create(client, items=[user("My name is Ada.")])
    first = (await client.post("/v1/responses", json={"input": "What is my name?", "conversation": made["id"]})).json()
    Response.model_validate(first)
    assert first["status"] == "completed" and first["conversation"] == {"id": made["id"]}
    assert [message.content for message in renderer.rendered[-1]] == ["My name is Ada.", "What is my name?"]
    assert (await client.get(f"/v1/responses/{first['id']}")).json() == first
    listed = (await client.get(f"/v1/responses/{first['id']}/input_items")).json()
    assert texts(listed["data"]) == ["What is my name?"], "input_items lists only the request's own input"
    items = await items_of(client, made["id"])
    assert texts(items) == ["My name is Ada.", "What is my name?", " ".join(FAKE_REPLY)]
    assert items[-1]["id"] == first["output"][0]["id"]

    # {id} works as well as the bare id; store: false responses add their turn too.
    second = (
        await client.post("/v1/responses", json={"input": "Again?", "conversation": {"id": made["id"]}, "store": False})
    ).json()
    assert second["conversation"] == {"id": made["id"]}
    assert (await client.get(f"/v1/responses/{second['id']}")).status_code == 404
    assert [message.content for message in renderer.rendered[-1]][:3] == texts(items)
    assert texts(await items_of(client, made["id"])) == [*texts(items), "Again?", " ".join(FAKE_REPLY)]

    # Deleting the conversation leaves its responses.
    await client.delete(f"/v1/conversations/{made['id']}")
    assert (await client.get(f"/v1/responses/{first['id']}")).status_code == 200


async def test_a_streamed_turn_is_well_formed_and_appended(client: httpx.AsyncClient) -> None:
    made = await create(client)
    reply = await client.post("/v1/responses", json={"input": "hi", "conversation": made["id"], "stream": True})
    final = assert_well_formed_stream(parse_sse(reply.text))
    assert final["conversation"] == {"id": made["id"]}
    assert texts(await items_of(client, made["id"])) == ["hi", " ".join(FAKE_REPLY)]


async def test_tool_calls_chain_through_the_conversation(
    client: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer
) -> None:
    runner.separator = ""
    runner.reply = ['<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>']
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    made = await create(client)
    called = (
        await client.post("/v1/responses", json={"input": "Weather?", "conversation": made["id"], "tools": [tool]})
    ).json()
    call = called["output"][0]
    assert call["type"] == "function_call"
    runner.reply = ["Sunny."]
    answer = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    done = await client.post("/v1/responses", json={"input": [answer], "conversation": made["id"], "tools": [tool]})
    assert done.status_code == 200, done.text
    assert [item["type"] for item in await items_of(client, made["id"])] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    unknown = {"type": "function_call_output", "call_id": "call_nope", "output": "x"}
    refused = await client.post("/v1/responses", json={"input": [unknown], "conversation": made["id"]})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "input[0].call_id"


async def test_one_response_at_a_time_and_failures_add_nothing(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    made = await create(client)
    runner.delay_s = 0.05
    running = (
        await client.post("/v1/responses", json={"input": "slow", "conversation": made["id"], "background": True})
    ).json()
    locked = await client.post("/v1/responses", json={"input": "meanwhile", "conversation": made["id"]})
    assert locked.status_code == 400
    assert locked.json()["error"]["code"] == "conversation_locked"
    assert locked.json()["error"]["param"] == "conversation"
    assert (await poll_until_done(client, running["id"]))["status"] == "completed"
    runner.delay_s = 0
    assert (await client.post("/v1/responses", json={"input": "now", "conversation": made["id"]})).status_code == 200
    assert texts(await items_of(client, made["id"])) == ["slow", " ".join(FAKE_REPLY), "now", " ".join(FAKE_REPLY)]

    # A failed response and a cancelled one add nothing, and free the conversation.
    runner.fail_after = 2
    failed = (await client.post("/v1/responses", json={"input": "boom", "conversation": made["id"]})).json()
    assert failed["status"] == "failed"
    runner.fail_after = None
    runner.delay_s = 0.05
    cancelled = (
        await client.post("/v1/responses", json={"input": "stop", "conversation": made["id"], "background": True})
    ).json()
    await asyncio.sleep(0.1)
    assert (await client.post(f"/v1/responses/{cancelled['id']}/cancel")).json()["status"] == "cancelled"
    runner.delay_s = 0
    assert (await client.post("/v1/responses", json={"input": "last", "conversation": made["id"]})).status_code == 200
    assert texts(await items_of(client, made["id"]))[-2:] == ["last", " ".join(FAKE_REPLY)]
    assert "boom" not in texts(await items_of(client, made["id"]))
    assert "stop" not in texts(await items_of(client, made["id"]))


async def test_a_response_ended_by_recovery_frees_its_conversation(
    client: httpx.AsyncClient, runner: FakeRunner, app_runtime: Runtime
) -> None:
    made = await create(client)
    runner.delay_s = 0.05
    runner.reply = ["w"] * 1000
    stuck = (
        await client.post("/v1/responses", json={"input": "x", "conversation": made["id"], "background": True})
    ).json()
    # Recovery (or a cancel that timed out) ends it without the executor's final commit.
    while stuck["id"] not in runner.runs:  # claimed, generating
        await asyncio.sleep(0.01)
    async with app_runtime.database.transaction() as session:
        assert await jobs.expire_leases(session) == 1
    error = {"code": "server_error", "message": "lost"}
    assert await end_response(app_runtime.database, None, stuck["id"], status="failed", error=error)
    runner.delay_s = 0
    runner.reply = list(FAKE_REPLY)
    after = await client.post("/v1/responses", json={"input": "y", "conversation": made["id"]})
    assert after.status_code == 200, after.text
    runner.cancel(stuck["id"])
    assert (await poll_until_done(client, stuck["id"]))["status"] == "failed"
    assert texts(await items_of(client, made["id"])) == ["y", " ".join(FAKE_REPLY)]


async def test_an_unstored_claim_ends_after_its_lease(
    client: httpx.AsyncClient, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = await create(client)
    runner.delay_s = 0.05
    runner.reply = ["w"] * 1000
    body = {"input": "x", "conversation": made["id"], "store": False}
    # A store: false response whose worker never finishes it (here: a model that does not stop).
    hung = asyncio.create_task(client.post("/v1/responses", json=body))
    while not runner.jobs:
        await asyncio.sleep(0.01)
    runner.delay_s = 0
    runner.reply = list(FAKE_REPLY)
    locked = await client.post("/v1/responses", json={"input": "y", "conversation": made["id"]})
    assert locked.status_code == 400 and locked.json()["error"]["code"] == "conversation_locked"
    monkeypatch.setattr(turns, "UNSTORED_CLAIM_LEASE_S", 0)
    freed = await client.post("/v1/responses", json={"input": "y", "conversation": made["id"]})
    assert freed.status_code == 200, freed.text
    runner.cancel(runner.jobs[0].response_id)
    assert (await hung).json()["status"] == "cancelled"
    assert texts(await items_of(client, made["id"])) == ["y", " ".join(FAKE_REPLY)], "the cancelled one adds nothing"


async def test_an_embedded_start_frees_the_conversations_of_the_unstored_turns_it_lost(
    client: httpx.AsyncClient, runner: FakeRunner, app_runtime: Runtime
) -> None:
    unstored, stored = await create(client), await create(client)
    runner.delay_s, runner.reply = 0.05, ["w"] * 1000
    # Two turns that never finish, as if the process running them had been killed: one store: false, one stored.
    hung = [
        asyncio.create_task(
            client.post("/v1/responses", json={"input": "x", "conversation": unstored["id"], "store": False})
        ),
        asyncio.create_task(client.post("/v1/responses", json={"input": "x", "conversation": stored["id"]})),
    ]
    while len(runner.jobs) < 2:
        await asyncio.sleep(0.01)
    runner.delay_s, runner.reply = 0, list(FAKE_REPLY)
    # What an embedded start does before its first request (no turn of the previous process runs any more).
    await release_unfinished_responses(app_runtime.database)
    await release_unstored_turns(app_runtime.database)
    freed = await client.post("/v1/responses", json={"input": "y", "conversation": unstored["id"]})
    assert freed.status_code == 200, freed.text  # at once, not after the unstored claim's 10-minute lease
    # A stored turn's claim ends with its response, which the start's reconciliation round ends.
    locked = await client.post("/v1/responses", json={"input": "y", "conversation": stored["id"]})
    assert locked.status_code == 400 and locked.json()["error"]["code"] == "conversation_locked"
    for job in runner.jobs[:2]:
        runner.cancel(job.response_id)
    await asyncio.gather(*hung)


async def test_conversation_errors(client: httpx.AsyncClient) -> None:
    unknown = await client.post("/v1/responses", json={"input": "x", "conversation": "conv_nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "conversation"
    made = await create(client)
    first = (await client.post("/v1/responses", json={"input": "x"})).json()
    both = await client.post(
        "/v1/responses", json={"input": "x", "conversation": made["id"], "previous_response_id": first["id"]}
    )
    assert both.status_code == 400 and both.json()["error"]["code"] == "mutually_exclusive_parameters"
    assert await items_of(client, made["id"]) == [], "a refused create adds nothing"


async def test_another_tenants_conversation_is_not_found(
    two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    alpha, beta = two_tenants
    mine = await create(alpha, items=[user("secret")])
    item_id = (await items_of(alpha, mine["id"]))[0]["id"]
    for reply in (
        await beta.get(f"/v1/conversations/{mine['id']}"),
        await beta.post(f"/v1/conversations/{mine['id']}", json={"metadata": {"x": "y"}}),
        await beta.get(f"/v1/conversations/{mine['id']}/items"),
        await beta.get(f"/v1/conversations/{mine['id']}/items/{item_id}"),
        await beta.delete(f"/v1/conversations/{mine['id']}/items/{item_id}"),
        await beta.post(f"/v1/conversations/{mine['id']}/items", json={"items": [user("x")]}),
        await beta.delete(f"/v1/conversations/{mine['id']}"),
        await beta.post("/v1/responses", json={"input": "x", "conversation": mine["id"]}),
    ):
        assert reply.status_code == 404, reply.text
    stolen = await beta.post("/v1/responses", json={"input": [{"type": "item_reference", "id": item_id}]})
    assert stolen.status_code == 400 and stolen.json()["error"]["param"] == "input[0].id"
    assert texts(await items_of(alpha, mine["id"])) == ["secret"]


CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}
ANSWER = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
ORPHAN = {"type": "function_call_output", "call_id": "call_nope", "output": "x"}


@pytest.mark.parametrize(
    ("item", "param", "code"),
    [
        ({"type": "computer_call", "id": "cu_1"}, "items[1].type", "unsupported_item_type"),
        ({"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}, "items[1].content[0].type", None),
        ({"role": "user", "content": [{"type": "output_text", "text": "x"}]}, "items[1].content[0].type", None),
        (ORPHAN, "items[1].call_id", "invalid_value"),
    ],
)
async def test_items_are_checked_as_input_is_and_errors_name_items(
    client: httpx.AsyncClient, item: dict, param: str, code: str | None
) -> None:
    # The same two items as a create's input: the same 400, naming input[1] there.
    as_input = await client.post("/v1/responses", json={"input": [user("hi"), item]})
    assert_error(as_input, 400, param="input" + param.removeprefix("items"), code=code)
    assert_error(
        await client.post("/v1/conversations", json={"items": [user("hi"), item]}), 400, param=param, code=code
    )
    made = await create(client, items=[user("before")])
    reply = await client.post(f"/v1/conversations/{made['id']}/items", json={"items": [user("hi"), item]})
    assert_error(reply, 400, param=param, code=code)
    assert texts(await items_of(client, made["id"])) == ["before"], "a refused append added items"


async def test_a_call_output_answers_a_call_of_its_items_or_of_the_conversation(client: httpx.AsyncClient) -> None:
    made = await create(client, items=[user("weather?"), CALL, ANSWER])
    assert [item["type"] for item in await items_of(client, made["id"])] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    asked = await create(client, items=[user("weather?"), CALL])
    answered = await client.post(f"/v1/conversations/{asked['id']}/items", json={"items": [ANSWER]})
    assert answered.status_code == 200, answered.text
    orphan = await client.post(f"/v1/conversations/{asked['id']}/items", json={"items": [ORPHAN]})
    assert_error(orphan, 400, param="items[0].call_id", code="invalid_value")
    # A reference to a stored output is checked too: its call is not in this conversation.
    output_id = (await items_of(client, asked["id"]))[-1]["id"]
    elsewhere = await create(client, items=[user("other")])
    reply = await client.post(
        f"/v1/conversations/{elsewhere['id']}/items", json={"items": [{"type": "item_reference", "id": output_id}]}
    )
    assert_error(reply, 400, param="items[0].call_id", code="invalid_value")
