"""The API layer end to end in-process, with the fake model: create, stream, store, GET, DELETE, chaining."""

from __future__ import annotations

import httpx
import pytest
from openai.types.responses import Response
from sqlalchemy import event

from app.runtime import Runtime
from app.testing.fakes import FAKE_REPLY, FakeRenderer, FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import FAILED_WITH_OPEN_MESSAGE, assert_well_formed_stream

REPLY = " ".join(FAKE_REPLY)


async def create(client: httpx.AsyncClient, **body: object) -> dict:
    reply = await client.post("/v1/responses", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


async def test_create_returns_a_full_response_that_get_returns_again(client: httpx.AsyncClient) -> None:
    created = await create(client, input="hello", metadata={"topic": "greeting"}, user="u1")
    parsed = Response.model_validate(created)
    assert parsed.status == "completed"
    assert parsed.output_text == REPLY
    assert parsed.usage is not None and parsed.usage.output_tokens == len(FAKE_REPLY)
    assert parsed.usage.total_tokens == parsed.usage.input_tokens + parsed.usage.output_tokens
    assert parsed.metadata == {"topic": "greeting"} and parsed.user == "u1"
    assert created["completed_at"] is not None
    fetched = await client.get(f"/v1/responses/{created['id']}")
    assert fetched.status_code == 200
    assert fetched.json() == created


async def test_incomplete_when_max_output_tokens_cuts_it(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    runner.reply = [f"w{index}" for index in range(40)]
    created = await create(client, input="hello", max_output_tokens=16)
    assert created["status"] == "incomplete"
    assert created["incomplete_details"] == {"reason": "max_output_tokens"}
    assert created["output"][0]["status"] == "incomplete"
    assert created["output"][0]["content"][0]["text"] == " ".join(runner.reply[:16])
    assert created["usage"]["output_tokens"] == 16
    assert created["completed_at"] is None


async def test_stream_is_well_formed_and_ends_in_what_get_returns(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/responses", json={"input": "hello", "stream": True})
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert reply.text.rstrip().endswith("data: [DONE]")
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert [event["type"] for event in events[:2]] == ["response.created", "response.in_progress"]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    fetched = (await client.get(f"/v1/responses/{final['id']}")).json()
    assert fetched == final


async def test_store_false_returns_the_response_and_keeps_nothing(client: httpx.AsyncClient) -> None:
    created = await create(client, input="hello", store=False)
    assert created["status"] == "completed" and created["store"] is False
    assert (await client.get(f"/v1/responses/{created['id']}")).status_code == 404
    assert (await client.get(f"/v1/responses/{created['id']}/input_items")).status_code == 404
    chained = await client.post("/v1/responses", json={"input": "more", "previous_response_id": created["id"]})
    assert chained.status_code == 400
    assert chained.json()["error"]["param"] == "previous_response_id"
    assert chained.json()["error"]["code"] == "previous_response_not_found"


async def test_chain_shows_the_whole_history_in_order_without_inheriting(
    client: httpx.AsyncClient, renderer: FakeRenderer
) -> None:
    first = await create(client, input="one", instructions="be terse", temperature=0.5)
    second = await create(client, input="two", previous_response_id=first["id"])
    third = await create(
        client,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "three"}]}],
        previous_response_id=second["id"],
        instructions="be kind",
    )
    seen = [(message.role, message.content) for message in renderer.rendered[-1]]
    assert seen == [
        ("system", "be kind"),
        ("user", "one"),
        ("assistant", REPLY),
        ("user", "two"),
        ("assistant", REPLY),
        ("user", "three"),
    ]
    first_seen = renderer.rendered[1][0]
    assert (first_seen.role, first_seen.content) == ("user", "one"), "instructions were inherited"
    assert second["instructions"] is None and second["temperature"] == 1.0
    assert third["previous_response_id"] == second["id"]
    own = (await client.get(f"/v1/responses/{third['id']}/input_items")).json()
    assert [item["content"][0]["text"] for item in own["data"]] == ["three"]


async def test_delete_removes_the_response_and_its_items(client: httpx.AsyncClient) -> None:
    created = await create(client, input="hello")
    deleted = await client.delete(f"/v1/responses/{created['id']}")
    assert deleted.status_code == 200
    assert deleted.json() == {"id": created["id"], "object": "response", "deleted": True}
    assert (await client.get(f"/v1/responses/{created['id']}")).status_code == 404
    assert (await client.get(f"/v1/responses/{created['id']}/input_items")).status_code == 404
    assert (await client.delete(f"/v1/responses/{created['id']}")).status_code == 404
    chained = await client.post("/v1/responses", json={"input": "x", "previous_response_id": created["id"]})
    assert chained.status_code == 400 and chained.json()["error"]["code"] == "previous_response_not_found"


async def test_every_role_and_part_kind_is_accepted_and_listed(client: httpx.AsyncClient) -> None:
    created = await create(
        client,
        input=[
            {"role": "developer", "content": "rules"},
            {"role": "system", "content": "sys"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": []}]},
            {"role": "assistant", "content": "plain"},
            {"role": "user", "content": "q2"},
        ],
    )
    listed = (await client.get(f"/v1/responses/{created['id']}/input_items", params={"order": "asc"})).json()
    assert [item["role"] for item in listed["data"]] == [
        "developer",
        "system",
        "user",
        "assistant",
        "assistant",
        "user",
    ]
    assert listed["data"][3]["content"][0]["type"] == "output_text"
    assert listed["data"][4]["content"] == [{"type": "output_text", "text": "plain", "annotations": [], "logprobs": []}]
    assert all(item["id"].startswith("msg_") for item in listed["data"])


async def test_models_and_health(client: httpx.AsyncClient) -> None:
    models = (await client.get("/v1/models")).json()
    assert models["object"] == "list" and models["data"][0]["id"] == "fake-model"
    assert (await client.get("/health")).json() == {"status": "ok"}


async def test_model_names_are_checked(client: httpx.AsyncClient) -> None:
    assert (await create(client, input="x", model="fake-model"))["model"] == "fake-model"
    wrong = await client.post("/v1/responses", json={"input": "x", "model": "gpt-4o"})
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "model_not_found"


async def test_extension_fields_and_agent_parameters_are_accepted(client: httpx.AsyncClient) -> None:
    created = await create(
        client,
        input=[{"role": "developer", "content": "x"}, {"role": "user", "content": "y"}],
        client_metadata={"session": "abc"},
        include=["reasoning.encrypted_content"],
        prompt_cache_key="k",
        safety_identifier="s",
        reasoning={"effort": "low", "summary": "auto"},
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[],
        stream_options={"include_obfuscation": False},
        service_tier="auto",
    )
    assert created["status"] == "completed" and created["prompt_cache_key"] == "k"


async def test_a_generation_failure_ends_the_stream_with_error_then_failed(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    runner.fail_after = 2
    reply = await client.post("/v1/responses", json={"input": "hello", "stream": True})
    events = parse_sse(reply.text)
    # The message it had opened is closed first (incomplete), so the SDK's accumulator sees it end.
    assert [event["type"] for event in events[-5:]] == FAILED_WITH_OPEN_MESSAGE
    assert "error" not in events[-2], "the SDK raises on a nested error key"
    final = assert_well_formed_stream(events)
    assert final["output"][0]["status"] == "incomplete"
    assert final["status"] == "failed" and final["error"]["code"] == "server_error"
    assert final["output"][0]["content"][0]["text"] == "the quick"
    assert (await client.get(f"/v1/responses/{final['id']}")).json() == final
    plain = (await client.post("/v1/responses", json={"input": "hello"})).json()
    assert plain["status"] == "failed" and plain["error"]["message"] == "the fake model broke"


async def test_the_chain_is_read_with_a_fixed_number_of_queries(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    async def queries_to_chain_onto(previous: str) -> int:
        statements.clear()
        event.listen(app_runtime.database.engine.sync_engine, "before_cursor_execute", count)
        try:
            await create(client, input="next", previous_response_id=previous)
        finally:
            event.remove(app_runtime.database.engine.sync_engine, "before_cursor_execute", count)
        return len(statements)

    short = await create(client, input="one")
    long = short
    for turn in range(6):
        long = await create(client, input=f"turn {turn}", previous_response_id=long["id"])
    assert await queries_to_chain_onto(short["id"]) == await queries_to_chain_onto(long["id"])


async def test_structured_output_formats_reach_the_model_as_grammars(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    text = {"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}}
    created = await create(client, input="2+2?", text=text)
    assert created["text"] == {**text, "verbosity": "medium"}, "the format is echoed as given"
    grammar = runner.jobs[-1].sampling.grammar
    assert grammar is not None and '"\\"answer\\""' in grammar
    await create(client, input="json please", text={"format": {"type": "json_object"}})
    assert runner.jobs[-1].sampling.grammar is not None and "object" in runner.jobs[-1].sampling.grammar
    await create(client, input="plain")
    assert runner.jobs[-1].sampling.grammar is None


@pytest.mark.settings(default_max_output_tokens=20)
async def test_a_deployment_cap_applies_when_the_request_gives_none(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    runner.reply = [f"w{index}" for index in range(40)]
    capped = await create(client, input="hello")
    assert capped["max_output_tokens"] == 20 and capped["status"] == "incomplete"
    assert capped["usage"]["output_tokens"] == 20
    own = await create(client, input="hello", max_output_tokens=30)
    assert own["usage"]["output_tokens"] == 30


@pytest.mark.settings(default_temperature=0.2)
async def test_a_deployment_temperature_applies_when_the_request_gives_none(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    assert (await create(client, input="hello"))["temperature"] == 0.2
    assert runner.jobs[-1].sampling.temperature == 0.2
    assert (await create(client, input="hello", temperature=1.5))["temperature"] == 1.5
