"""Hostile input (issue 9): every request that once answered 500 or stored a row it could not read back is a clear
4xx now, stores nothing, and the server keeps serving."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from app.db.models import ResponseRow
from app.generation import prompt
from app.runtime import Runtime
from app.testing.fakes import FakeRenderer, FakeRunner
from tests.protocol import assert_error


async def stored_responses(runtime: Runtime) -> int:
    async with runtime.database.read() as session:
        return int(await session.scalar(select(func.count()).select_from(ResponseRow)) or 0)


async def assert_refused(
    client: httpx.AsyncClient,
    runtime: Runtime,
    body: bytes | dict,
    status: int,
    *,
    param: str | None,
    code: str | None,
) -> dict:
    """A 4xx naming `param`, nothing stored, and the server still serving."""
    before = await stored_responses(runtime)
    if isinstance(body, dict):
        reply = await client.post("/v1/responses", json=body)
    else:
        reply = await client.post("/v1/responses", content=body, headers={"content-type": "application/json"})
    error = assert_error(reply, status, param=param, code=code)
    assert await stored_responses(runtime) == before, "a refused request stored a row"
    assert (await client.post("/v1/responses", json={"input": "still serving"})).status_code == 200
    return error


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [{"type": {}}]}, "input[0].type"),
        ({"input": [{"type": []}]}, "input[0].type"),
        ({"input": "hi", "tools": [{"type": {}}]}, "tools[0].type"),
        ({"input": "hi", "tools": [{"type": ["function"]}]}, "tools[0].type"),
    ],
)
async def test_an_unhashable_type_is_a_400(
    client: httpx.AsyncClient, app_runtime: Runtime, body: dict, param: str
) -> None:
    reply = await client.post("/v1/responses", json=body)
    assert_error(reply, 400, param=param)
    assert await stored_responses(app_runtime) == 0


async def test_json_nested_a_thousand_deep_is_a_400(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    deep = b'{"input": "hi", "metadata": ' + b'{"a": ' * 1000 + b"1" + b"}" * 1000 + b"}"
    reply = await client.post("/v1/responses", content=deep, headers={"content-type": "application/json"})
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "invalid_json", reply.text
    # Past the server's own limit (64) but well within the interpreter's: named where it goes too deep.
    nested: dict = {"type": "string"}
    for _ in range(40):
        nested = {"type": "object", "properties": {"a": nested}}
    body = {"input": "hi", "text": {"format": {"type": "json_schema", "name": "t", "schema": nested}}}
    reply = await client.post("/v1/responses", json=body)
    assert reply.status_code == 400 and "64 levels" in reply.json()["error"]["message"]
    assert reply.json()["error"]["param"].startswith("text.format.schema.properties.a.properties.a")
    assert await stored_responses(app_runtime) == 0
    assert (await client.post("/v1/responses", json={"input": "still serving"})).status_code == 200


LONE = "x\ud800y"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": LONE}, "input"),
        ({"input": [{"role": "user", "content": [{"type": "input_text", "text": LONE}]}]}, "input[0].content[0].text"),
        ({"input": "hi", "metadata": {"k": LONE}}, "metadata.k"),
        ({"input": "hi", "metadata": {LONE: "v"}}, "metadata.x\\ud800y"),
        ({"input": "hi", "instructions": LONE}, "instructions"),
        ({"input": "hi", "tools": [{"type": "function", "name": "f", "description": LONE}]}, "tools[0].description"),
        ({"input": "hi", "user": "\udfff"}, "user"),
    ],
)
async def test_a_lone_surrogate_anywhere_is_a_400_and_stores_nothing(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner, body: dict, param: str
) -> None:
    raw = json.dumps(body).encode()  # ensure_ascii: the surrogate travels as the escape \ud800, as a client sends it
    await assert_refused(client, app_runtime, raw, 400, param=param, code="invalid_value")
    assert all(LONE not in json.dumps(job.response) for job in runner.jobs)


async def test_a_surrogate_pair_is_fine(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/responses", json={"input": "smile \U0001f600", "metadata": {"k": "\U0001f600"}})
    assert reply.status_code == 200, reply.text
    assert (await client.get(f"/v1/responses/{reply.json()['id']}")).json()["metadata"] == {"k": "\U0001f600"}


@pytest.mark.settings(api_keys=["sk-right"])
async def test_a_non_ascii_bearer_key_is_a_401(client: httpx.AsyncClient) -> None:
    for key in ("sk-ключ", "sk-\u00e9"):
        reply = await client.get("/v1/models", headers={"authorization": f"Bearer {key}".encode()})
        assert_error(reply, 401, param=None, code="invalid_api_key")
    assert (await client.get("/v1/models", headers={"authorization": "Bearer sk-right"})).status_code == 200


@pytest.mark.settings(api_keys=["sk-ключ"])
async def test_a_non_ascii_key_can_be_configured_and_used(client: httpx.AsyncClient) -> None:
    reply = await client.get("/v1/models", headers={"authorization": "Bearer sk-ключ".encode()})
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize("cursor", [2**31, 2**63, 10**30])
async def test_a_huge_starting_after_is_a_400_before_the_stream(client: httpx.AsyncClient, cursor: int) -> None:
    created = (await client.post("/v1/responses", json={"input": "x", "background": True, "stream": True})).text
    response_id = json.loads(created.split("data: ", 1)[1].split("\n", 1)[0])["response"]["id"]
    reply = await client.get(f"/v1/responses/{response_id}", params={"stream": "true", "starting_after": cursor})
    assert_error(reply, 400, param="starting_after")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [{"role": "user", "content": "x", "id": "msg_\u0000"}]}, "input[0].id"),
        ({"input": [{"role": "user", "content": "x", "id": "m" * 65}]}, "input[0].id"),
        ({"input": [{"type": "item_reference", "id": "msg_\u0000"}]}, "input[0].id"),
        ({"input": "x", "previous_response_id": "resp_\u0000"}, "previous_response_id"),
        ({"input": "x", "previous_response_id": "r" * 65}, "previous_response_id"),
        ({"input": "x", "conversation": "conv_\u0000"}, "conversation"),
        ({"input": "x", "conversation": {"id": "conv_\u0000"}}, "conversation.id"),
    ],
)
async def test_ids_that_no_column_can_hold_are_400s(
    client: httpx.AsyncClient, app_runtime: Runtime, body: dict, param: str
) -> None:
    await assert_refused(client, app_runtime, body, 400, param=param, code="invalid_value")


async def test_a_nul_in_a_url_is_a_400(client: httpx.AsyncClient) -> None:
    created = (await client.post("/v1/responses", json={"input": "x"})).json()
    for url in (
        "/v1/responses/resp_%00",
        f"/v1/responses/{created['id']}/input_items?after=msg_%00",
        "/v1/conversations/conv_%00/items",
    ):
        assert_error(await client.get(url), 400, param=None, code="invalid_value")


async def test_headers_over_the_limit_are_a_431(client: httpx.AsyncClient) -> None:
    for headers in (
        {"authorization": "Bearer " + "k" * 100_000},
        {f"x-extra-{index}": "v" * 500 for index in range(40)},
    ):
        reply = await client.get("/v1/models", headers=headers)
        assert_error(reply, 431, param=None, code="request_header_fields_too_large")
    assert (await client.get("/v1/models", headers={"x-extra": "v" * 8_000})).status_code == 200


@pytest.mark.settings(max_request_bytes=4096)
async def test_a_body_over_the_limit_is_a_413_by_its_length(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    body = json.dumps({"input": "x" * 5000}).encode()
    await assert_refused(client, app_runtime, body, 413, param=None, code="request_too_large")


@pytest.mark.settings(max_request_bytes=4096)
async def test_a_chunked_body_is_refused_at_the_first_chunk_past_the_limit(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    sent: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"input": "'
        for _ in range(1000):  # 1 MB, if it were all read
            sent.append(1)
            yield b"x" * 1024
        yield b'"}'

    reply = await client.post("/v1/responses", content=chunks(), headers={"content-type": "application/json"})
    assert_error(reply, 413, param=None, code="request_too_large")
    assert len(sent) < 10, "the body was read past the limit"
    assert await stored_responses(app_runtime) == 0


@pytest.mark.settings(max_input_items=3, max_tools=2, max_tool_bytes=1024)
async def test_counts_and_sizes_have_limits(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    four = [{"role": "user", "content": "x"}] * 4
    await assert_refused(client, app_runtime, {"input": four}, 400, param="input", code="too_many_items")
    tool = {"type": "function", "name": "f"}
    tools = [{**tool, "name": f"f{index}"} for index in range(3)]
    await assert_refused(client, app_runtime, {"input": "x", "tools": tools}, 400, param="tools", code="too_many_tools")
    namespace = {"type": "namespace", "name": "n", "tools": tools[:2]}
    body = {"input": "x", "tools": [namespace]}
    await assert_refused(client, app_runtime, body, 400, param="tools", code="too_many_tools")
    big = {**tool, "description": "d" * 2000}
    body = {"input": "x", "tools": [big]}
    await assert_refused(client, app_runtime, body, 400, param="tools[0]", code="tool_too_large")


@pytest.mark.settings(max_concurrent_requests_per_tenant=1)
async def test_one_request_too_many_in_flight_is_a_429_with_retry_after(
    client: httpx.AsyncClient, runner: FakeRunner, app_runtime: Runtime
) -> None:
    import asyncio

    runner.delay_s = 0.05
    first = asyncio.create_task(client.post("/v1/responses", json={"input": "slow"}))
    while not runner.jobs:
        await asyncio.sleep(0.01)
    reply = await client.get("/v1/models")
    assert_error(reply, 429, param=None, code="rate_limit_exceeded")
    assert reply.headers["retry-after"] == "1"
    assert (await first).status_code == 200
    assert app_runtime.slots.in_flight("public") == 0
    # A stream holds its slot until its last event, then gives it back.
    streamed = await client.post("/v1/responses", json={"input": "x", "stream": True})
    assert "response.completed" in streamed.text
    assert app_runtime.slots.in_flight("public") == 0
    assert (await client.get("/v1/models")).status_code == 200


@pytest.mark.settings(max_concurrent_requests_per_tenant=1)
async def test_the_reads_hold_a_slot_too_and_give_it_back(
    client: httpx.AsyncClient, runner: FakeRunner, app_runtime: Runtime
) -> None:
    """GET a response and the list take their slot in one dependency with no `yield` (the headers' middleware gives
    it back): refused while another request holds the only one, and given back after a 200, a 404 and a 400."""
    import asyncio

    done = await client.post("/v1/responses", json={"input": "first"})
    started = len(runner.jobs)
    runner.delay_s = 0.05
    first = asyncio.create_task(client.post("/v1/responses", json={"input": "slow"}))
    while len(runner.jobs) == started:
        await asyncio.sleep(0.01)
    for path in (f"/v1/responses/{done.json()['id']}", "/v1/responses"):
        assert_error(await client.get(path), 429, param=None, code="rate_limit_exceeded")
    assert (await first).status_code == 200
    assert app_runtime.slots.in_flight("public") == 0
    assert (await client.get(f"/v1/responses/{done.json()['id']}")).status_code == 200
    assert (await client.get("/v1/responses/resp_missing")).status_code == 404
    assert (await client.get("/v1/responses", params={"limit": 0})).status_code == 400
    assert (await client.get("/v1/responses")).status_code == 200
    assert app_runtime.slots.in_flight("public") == 0


SCHEMA_FORMAT = {"type": "json_schema", "name": "t", "schema": {"type": "string", "maxLength": 30000}}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi", "text": {"format": SCHEMA_FORMAT}}, "text.format.schema"),
        (
            {
                "input": "hi",
                "text": {"format": {**SCHEMA_FORMAT, "schema": {"type": "array", "maxItems": 30000}}},
            },
            "text.format.schema",
        ),
        (
            {
                "input": "hi",
                "tools": [{"type": "function", "name": "f", "parameters": SCHEMA_FORMAT["schema"]}],
                "tool_choice": "required",
            },
            "tools[0].parameters",
        ),
        (
            {
                "input": "hi",
                "tools": [
                    {"type": "function", "name": "ok"},
                    {
                        "type": "custom",
                        "name": "c",
                        "format": {"type": "grammar", "syntax": "regex", "definition": "a{0,30000}"},
                    },
                ],
                "tool_choice": {"type": "custom", "name": "c"},
            },
            "tools[1].format.definition",
        ),
        (
            {
                "input": "hi",
                "tools": [
                    {
                        "type": "custom",
                        "name": "c",
                        "format": {"type": "grammar", "syntax": "regex", "definition": "((a{0,100}){0,100}){0,100}"},
                    }
                ],
                "tool_choice": "required",
            },
            "tools[0].format.definition",
        ),
    ],
)
async def test_a_grammar_llama_cpp_cannot_survive_is_a_400_naming_its_param(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner, body: dict, param: str
) -> None:
    error = await assert_refused(client, app_runtime, body, 400, param=param, code=None)
    assert "at most" in error["message"]
    assert len(runner.jobs) == 1, "the refused request reached the model"  # the one that checks it still serves


async def test_the_same_schemas_within_the_bounds_run(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    text = {"format": {**SCHEMA_FORMAT, "schema": {"type": "string", "maxLength": 500}}}
    assert (await client.post("/v1/responses", json={"input": "hi", "text": text})).status_code == 200
    assert runner.jobs[-1].sampling.grammar is not None


async def test_a_grammar_llama_cpp_refuses_is_a_400_not_a_failed_response(
    client: httpx.AsyncClient, app_runtime: Runtime, renderer: FakeRenderer
) -> None:
    renderer.grammars_build = False
    text = {"format": {**SCHEMA_FORMAT, "schema": {"type": "string"}}}
    await assert_refused(
        client, app_runtime, {"input": "hi", "text": text}, 400, param="text.format.schema", code="invalid_json_schema"
    )
    assert renderer.grammars, "the grammar was not test-built"


@pytest.mark.settings(max_prompt_chars=1024)
async def test_the_context_a_prompt_is_rendered_from_has_a_limit(
    client: httpx.AsyncClient, app_runtime: Runtime, renderer: FakeRenderer
) -> None:
    first = (await client.post("/v1/responses", json={"input": "word " * 150})).json()
    renders = len(renderer.rendered)
    # Each body is small; the chain it continues is what grows past the limit.
    body = {"input": "word " * 60, "previous_response_id": first["id"], "truncation": "auto"}
    await assert_refused(client, app_runtime, body, 400, param="input", code="context_length_exceeded")
    assert len(renderer.rendered) == renders + 1, "the refused context was rendered"  # +1: the still-serving one


async def test_a_heavy_context_becomes_messages_off_the_event_loop(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thousand items or more are turned into chat messages on a worker thread, so that other requests on the
    API node do not wait for it (issue 27); a light context stays on the loop (no thread hop)."""
    loop_thread = threading.get_ident()
    built_on: list[bool] = []
    build = prompt.build_context

    def recording(**kwargs: Any) -> Any:
        built_on.append(threading.get_ident() == loop_thread)
        return build(**kwargs)

    monkeypatch.setattr(prompt, "build_context", recording)
    assert (await client.post("/v1/responses", json={"input": "hi"})).status_code == 200
    assert built_on and all(built_on), "a light context left the event loop"
    built_on.clear()
    items = [{"role": "user" if index % 2 == 0 else "assistant", "content": "w"} for index in range(1001)]
    reply = await client.post("/v1/responses", json={"input": items, "truncation": "auto"})
    assert reply.status_code == 200, reply.text
    assert built_on and not any(built_on), "a heavy context was built on the event loop"
