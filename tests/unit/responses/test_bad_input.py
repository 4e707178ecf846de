"""Bad input: an OpenAI-shaped 4xx naming the problem, the server keeps serving, nothing stored changes."""

from __future__ import annotations

import httpx
import pytest

from app.testing.fakes import FakeRenderer, FakeRunner
from tests.protocol import assert_error

FUNCTION = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({}, "input", "missing_required_parameter"),
        ({"input": 3}, "input", None),
        ({"input": "x", "temperature": 2.5}, "temperature", "invalid_value"),
        ({"input": "x", "temperature": -0.1}, "temperature", "invalid_value"),
        ({"input": "x", "top_p": 1.5}, "top_p", "invalid_value"),
        ({"input": "x", "max_output_tokens": 15}, "max_output_tokens", "invalid_value"),
        ({"input": "x", "max_output_tokens": "many"}, "max_output_tokens", "invalid_value"),
        ({"input": "x", "store": "yes please"}, "store", "invalid_value"),
        ({"input": "x", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "invalid_value"),
        ({"input": "x", "metadata": {"k" * 65: "v"}}, "metadata", "invalid_value"),
        ({"input": "x", "metadata": {"k": "v" * 513}}, "metadata", "invalid_value"),
        ({"input": "x", "metadata": {"k": 1}}, "metadata.k", "invalid_value"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", "invalid_value"),
        ({"input": [{"role": "user"}]}, "input[0].content", "missing_required_parameter"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].id", "item_not_found"),
        ({"input": ["x", {"id": "msg_1"}]}, "input[0]", None),
        ({"input": [{"role": "user", "content": "x"}, {"id": "msg_1"}]}, "input[1].id", "item_not_found"),
        ({"input": [{"type": "compaction"}]}, "input[0].encrypted_content", "missing_required_parameter"),
        (
            {"input": [{"type": "compaction", "encrypted_content": "bm90IG91cnM="}]},
            "input[0].encrypted_content",
            "invalid_encrypted_content",
        ),
        ({"input": [{"type": "teleport"}]}, "input[0].type", "unsupported_item_type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
            "unsupported_content_type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "hologram"}]}]},
            "input[0].content[0]",
            None,
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]},
            "input[0].content[0].type",
            "invalid_value",
        ),
        ({"input": "x", "background": True, "store": False}, "background", "invalid_value"),
        (
            {"input": "x", "conversation": "conv_1", "previous_response_id": "resp_1"},
            "conversation",
            "mutually_exclusive_parameters",
        ),
        ({"input": "x", "conversation": {}}, "conversation.id", "missing_required_parameter"),
        ({"input": "x", "conversation": 7}, "conversation", "invalid_value"),
        ({"input": "x", "context_management": [{"type": "truncation"}]}, "context_management[0].type", "invalid_value"),
        (
            {"input": "x", "context_management": [{"type": "compaction", "compact_threshold": 0}]},
            "context_management[0].compact_threshold",
            "invalid_value",
        ),
        (
            {"input": "x", "tools": [{"type": "function", "name": "f", "parameters": {"type": "nope"}}]},
            "tools[0].parameters",
            "invalid_function_parameters",
        ),
        ({"input": "x", "tools": [FUNCTION, FUNCTION]}, "tools", "duplicate_tool_name"),
        ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name", "missing_required_parameter"),
        ({"input": "x", "tools": [{"type": "function", "name": "bad name!"}]}, "tools[0].name", "invalid_value"),
        (
            {
                "input": "x",
                "tools": [{"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "regex"}}],
            },
            "tools[0].format.definition",
            "invalid_value",
        ),
        ({"input": "x", "tools": [{"type": "teleporter"}]}, "tools[0].type", "invalid_value"),
        ({"input": "x", "tool_choice": "required"}, "tool_choice", "invalid_value"),
        (
            {"input": "x", "tools": [FUNCTION], "tool_choice": {"type": "function", "name": "other"}},
            "tool_choice.name",
            "invalid_value",
        ),
        (
            {"input": [{"type": "function_call_output", "call_id": "call_unknown", "output": "42"}]},
            "input[0].call_id",
            "invalid_value",
        ),
        ({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format", "invalid_value"),
        (
            {"input": "x", "text": {"format": {"type": "json_schema", "name": "p", "schema": {"type": "bogus"}}}},
            "text.format.schema",
            "invalid_json_schema",
        ),
        ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type", "invalid_value"),
        ({"input": "x", "truncation": "sometimes"}, "truncation", "invalid_value"),
        ({"input": "x", "previous_response_id": "resp_nope"}, "previous_response_id", "previous_response_not_found"),
        ({"input": "x", "model": "gpt-4o"}, "model", "model_not_found"),
        ({"input": []}, "input", "invalid_value"),
    ],
)
async def test_bad_create_is_a_400_naming_the_param(
    client: httpx.AsyncClient, body: dict, param: str, code: str | None
) -> None:
    before = await client.get("/v1/models")
    assert_error(await client.post("/v1/responses", json=body), 400, param=param, code=code)
    assert (await client.get("/v1/models")).json() == before.json()
    assert (await client.post("/v1/responses", json={"input": "still serving"})).status_code == 200


async def test_malformed_json_and_non_object_bodies(client: httpx.AsyncClient) -> None:
    headers = {"content-type": "application/json"}
    assert_error(await client.post("/v1/responses", content=b"{nope", headers=headers), 400, param=None)
    assert_error(await client.post("/v1/responses", content=b"[1, 2]", headers=headers), 400, param=None)
    assert_error(await client.post("/v1/responses", content=b"\xff\xfe", headers=headers), 400, param=None)


async def test_bad_input_stores_nothing(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    first = (await client.post("/v1/responses", json={"input": "keep me"})).json()
    await client.post("/v1/responses", json={"input": "x", "previous_response_id": first["id"], "temperature": 9})
    await client.post("/v1/responses", json={"input": [{"role": "user", "content": "ok"}, {"type": "nope"}]})
    assert len(runner.jobs) == 1, "a rejected request reached the model"
    assert (await client.get(f"/v1/responses/{first['id']}")).json() == first


async def test_context_length_exceeded_unless_truncation_auto(
    client: httpx.AsyncClient, renderer: FakeRenderer
) -> None:
    renderer.n_ctx = 40
    long_history = [{"role": "user", "content": "word " * 10} for _ in range(5)]
    error = assert_error(
        await client.post("/v1/responses", json={"input": long_history}),
        400,
        param="input",
        code="context_length_exceeded",
    )
    assert "context" in error["message"]
    created = await client.post("/v1/responses", json={"input": long_history, "truncation": "auto"})
    assert created.status_code == 200 and created.json()["truncation"] == "auto"
    assert len(renderer.rendered[-1]) < len(long_history), "oldest items were not dropped"
    one_huge = [{"role": "user", "content": "word " * 100}]
    assert_error(
        await client.post("/v1/responses", json={"input": one_huge, "truncation": "auto"}),
        400,
        param="input",
        code="context_length_exceeded",
    )


async def test_unknown_ids_are_404s(client: httpx.AsyncClient) -> None:
    for reply in (
        await client.get("/v1/responses/resp_missing"),
        await client.delete("/v1/responses/resp_missing"),
        await client.get("/v1/responses/resp_missing/input_items"),
    ):
        assert_error(reply, 404, param="response_id")


async def test_stream_on_get_of_a_foreground_response_is_a_400(client: httpx.AsyncClient) -> None:
    created = (await client.post("/v1/responses", json={"input": "x"})).json()
    assert_error(await client.get(f"/v1/responses/{created['id']}", params={"stream": "true"}), 400, param="stream")


@pytest.mark.settings(strict_params=True)
async def test_strict_mode_rejects_unknown_fields(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/responses", json={"input": "x", "client_metadata": {}})
    assert_error(reply, 400, param="client_metadata", code="unknown_parameter")
    assert (await client.post("/v1/responses", json={"input": "x"})).status_code == 200
