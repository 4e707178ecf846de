"""The Batch API in-process with the fake model: the SDK's whole round (upload, create, poll to completed, read
the output and error files by custom_id), validation failures, create-time refusals, paging and tenants."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from openai import AsyncOpenAI, BadRequestError, NotFoundError
from openai.types import Batch
from sqlalchemy import func, select

from app.batches.validation import MAX_LINE_BYTES, MAX_LINES
from app.db.models import BatchLineRow
from app.runtime import Runtime
from app.testing.fakes import FAKE_REPLY, FakeRunner
from tests.unit.batches.batch_files import advance_until, create_batch, jsonl, request_line, result_lines, upload

REPLY = " ".join(FAKE_REPLY)


def sdk_for(client: httpx.AsyncClient) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="unused", base_url=str(client.base_url.join("/v1")), http_client=client, max_retries=0)


@pytest.mark.settings(batch_interval_s=0.02, batch_max_running_lines=3, batch_lines_per_round=2)
async def test_sdk_batch_runs_to_completed_with_output_and_error_files(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    sdk = sdk_for(client)
    lines = [
        request_line(f"ok-{index}", {"input": f"hello {index}", "metadata": {"n": str(index)}}) for index in range(6)
    ]
    lines.append(request_line("unstored", {"input": "forget me", "store": False}))
    lines.append(request_line("bad-temperature", {"input": "hi", "temperature": 7}))
    lines.append(request_line("streamed", {"input": "hi", "stream": True}))
    lines.append(request_line("no-conversation", {"input": "hi", "conversation": "conv_nope"}))
    uploaded = await sdk.files.create(file=("requests.jsonl", jsonl(lines)), purpose="batch")
    batch = await sdk.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/responses", completion_window="24h", metadata={"job": "nightly"}
    )
    assert isinstance(batch, Batch) and batch.status == "validating" and batch.metadata == {"job": "nightly"}
    assert batch.expires_at == batch.created_at + 24 * 3600
    deadline = time.monotonic() + 30
    seen_progress = False
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        assert time.monotonic() < deadline, batch
        await asyncio.sleep(0.02)
        batch = await sdk.batches.retrieve(batch.id)
        counts = batch.request_counts
        seen_progress |= counts is not None and counts.total == 10 and 0 < counts.completed + counts.failed < 10
    assert batch.status == "completed", batch.errors
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (10, 7, 3)
    assert seen_progress, "request_counts were never seen between 0 and done"
    # Usage adds up every line's response (the refused ones never ran).
    assert batch.usage is not None and batch.usage.output_tokens == 7 * len(FAKE_REPLY)
    assert batch.usage.input_tokens > 0
    assert batch.usage.total_tokens == batch.usage.input_tokens + batch.usage.output_tokens
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at
    assert batch.output_file_id and batch.error_file_id
    output_file = await sdk.files.retrieve(batch.output_file_id)
    assert output_file.purpose == "batch_output"

    output = {}
    for raw in (await sdk.files.content(batch.output_file_id)).text.splitlines():
        line = json.loads(raw)
        output[line["custom_id"]] = line
    assert sorted(output) == sorted([*(f"ok-{index}" for index in range(6)), "unstored"])
    for index in range(6):
        line = output[f"ok-{index}"]
        assert line["id"].startswith("batch_req_") and line["error"] is None
        assert line["response"]["status_code"] == 200
        body = line["response"]["body"]
        assert body["status"] == "completed" and body["metadata"] == {"n": str(index)}
        assert body["output"][0]["content"][0]["text"] == REPLY
        assert body["store"] is True and body["background"] is False
        # A stored line's response is readable afterwards, as it is in the file.
        stored = await client.get(f"/v1/responses/{body['id']}")
        assert stored.status_code == 200 and stored.json()["output"] == body["output"]
    unstored = output["unstored"]["response"]["body"]
    assert unstored["store"] is False and unstored["output"][0]["content"][0]["text"] == REPLY
    assert (await client.get(f"/v1/responses/{unstored['id']}")).status_code == 404

    errors = {}
    for raw in (await sdk.files.content(batch.error_file_id)).text.splitlines():
        line = json.loads(raw)
        errors[line["custom_id"]] = line
    assert sorted(errors) == ["bad-temperature", "no-conversation", "streamed"]
    assert errors["no-conversation"]["response"]["status_code"] == 404
    assert errors["no-conversation"]["response"]["body"]["error"]["param"] == "conversation"
    assert errors["bad-temperature"]["response"]["status_code"] == 400
    assert errors["bad-temperature"]["response"]["body"]["error"]["param"] == "temperature"
    assert errors["streamed"]["response"]["body"]["error"]["param"] == "stream"

    listed = await sdk.batches.list(limit=10)
    assert [entry.id for entry in listed.data] == [batch.id]
    # The lines' results are kept once, in the files.
    async with app_runtime.database.read() as session:
        lines_left = await session.scalar(select(func.count()).select_from(BatchLineRow))
    assert lines_left == 0


@pytest.mark.parametrize(
    ("data", "code", "line", "param"),
    [
        (
            b'{"custom_id": "a", "method": "POST", "url": "/v1/responses", "body": {}}\n{not json\n',
            "invalid_json_line",
            2,
            None,
        ),
        (jsonl([request_line("a", method="GET")]), "invalid_method", 1, "method"),
        (jsonl([request_line("a", url="/v1/chat/completions")]), "invalid_url", 1, "url"),
        (jsonl([request_line("a"), request_line("b"), request_line("a")]), "duplicate_custom_id", 3, "custom_id"),
        (jsonl([request_line("a", body={"input": "x" * MAX_LINE_BYTES})]), "line_too_large", 1, None),
        (jsonl([{"method": "POST", "url": "/v1/responses", "body": {}}]), "missing_required_parameter", 1, "custom_id"),
        (b"\n\n", "empty_file", None, None),
    ],
    ids=["bad-json", "method", "url", "duplicate", "line-too-large", "no-custom-id", "empty"],
)
async def test_an_invalid_file_fails_the_batch_with_errors(
    client: httpx.AsyncClient, app_runtime: Runtime, data: bytes, code: str, line: int | None, param: str | None
) -> None:
    batch = await create_batch(client, data)
    failed = await advance_until(app_runtime, client, batch["id"])
    assert failed["status"] == "failed" and failed["failed_at"] is not None
    assert failed["errors"]["object"] == "list"
    first = failed["errors"]["data"][0]
    assert (first["code"], first["line"], first["param"]) == (code, line, param)
    assert first["message"]
    assert failed["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
    assert failed["output_file_id"] is None and failed["error_file_id"] is None
    assert failed["model"] is None


@pytest.mark.settings(model_aliases="gpt-4o=fake-model")
@pytest.mark.parametrize(
    ("first_body", "model"),
    [
        ({"input": "x"}, "fake-model"),  # none named: the default model, as the line's create resolves it
        ({"input": "x", "model": "gpt-4o"}, "fake-model"),  # an alias: the served model it stands for
        ({"input": "x", "model": "no-such-model"}, "no-such-model"),  # unknown: as named (the line fails alone)
    ],
    ids=["default", "alias", "unknown"],
)
async def test_the_batch_reports_the_model_its_lines_name(
    client: httpx.AsyncClient, app_runtime: Runtime, first_body: dict[str, str], model: str
) -> None:
    batch = await create_batch(client, jsonl([request_line("a", first_body), request_line("b")]))
    assert batch["model"] is None  # not known before the file is read
    started = await advance_until(app_runtime, client, batch["id"], ("in_progress", "finalizing", "completed"))
    assert started["model"] == model
    done = await advance_until(app_runtime, client, batch["id"])
    assert done["model"] == model
    assert Batch.model_validate(done).model == model


async def test_more_than_the_line_limit_fails_the_batch(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    line = b'{"custom_id": "%d", "method": "POST", "url": "/v1/responses", "body": {}}\n'
    data = b"".join(line % index for index in range(MAX_LINES + 1))
    batch = await create_batch(client, data)
    failed = await advance_until(app_runtime, client, batch["id"])
    assert failed["status"] == "failed"
    assert [(error["code"], error["line"]) for error in failed["errors"]["data"]] == [
        ("too_many_requests", MAX_LINES + 1)
    ]


async def test_create_refuses_other_endpoints_windows_and_files(client: httpx.AsyncClient) -> None:
    sdk = sdk_for(client)
    file_id = await upload(client, jsonl([request_line("a")]))
    with pytest.raises(BadRequestError) as endpoint:
        await sdk.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
    assert endpoint.value.body["param"] == "endpoint"  # type: ignore[index]
    assert "Only '/v1/responses' is supported for now" in endpoint.value.body["message"]  # type: ignore[index]
    window = await client.post(
        "/v1/batches", json={"input_file_id": file_id, "endpoint": "/v1/responses", "completion_window": "48h"}
    )
    assert window.status_code == 400 and window.json()["error"]["param"] == "completion_window"
    with pytest.raises(NotFoundError):
        await sdk.batches.create(input_file_id="file_nope", endpoint="/v1/responses", completion_window="24h")
    missing = await client.post("/v1/batches", json={"endpoint": "/v1/responses", "completion_window": "24h"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "input_file_id"
    assert (await client.get("/v1/batches/batch_nope")).status_code == 404
    assert (await client.post("/v1/batches/batch_nope/cancel")).status_code == 404
    assert (await client.get("/v1/batches")).json()["data"] == []


async def test_an_output_file_is_no_batch_input(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    batch = await create_batch(client, jsonl([request_line("a")]))
    done = await advance_until(app_runtime, client, batch["id"])
    assert done["status"] == "completed"
    reply = await client.post(
        "/v1/batches",
        json={"input_file_id": done["output_file_id"], "endpoint": "/v1/responses", "completion_window": "24h"},
    )
    # Before: a 404 "No such File object" for a file the client can read. A 400 that names its purpose.
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "input_file_id" and error["code"] == "invalid_file_purpose"
    assert "'batch_output'" in error["message"] and "purpose 'batch'" in error["message"]


async def test_list_pages_newest_first(client: httpx.AsyncClient) -> None:
    ids = [(await create_batch(client, jsonl([request_line("a")])))["id"] for _ in range(3)]
    sdk = sdk_for(client)
    first = await sdk.batches.list(limit=2)
    assert [entry.id for entry in first.data] == ids[::-1][:2] and first.has_more
    assert [entry.id async for entry in sdk.batches.list(limit=2)] == ids[::-1]


async def test_batches_are_their_tenants_alone(two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient]) -> None:
    alpha, beta = two_tenants
    batch = await create_batch(alpha, jsonl([request_line("a")]))
    assert (await beta.get(f"/v1/batches/{batch['id']}")).status_code == 404
    assert (await beta.post(f"/v1/batches/{batch['id']}/cancel")).status_code == 404
    assert (await beta.get("/v1/batches")).json()["data"] == []
    # Another tenant's file is no input file for beta: 404, as an unknown one.
    stolen = await beta.post(
        "/v1/batches",
        json={"input_file_id": batch["input_file_id"], "endpoint": "/v1/responses", "completion_window": "24h"},
    )
    assert stolen.status_code == 404 and stolen.json()["error"]["param"] == "input_file_id"
    assert (await alpha.get(f"/v1/batches/{batch['id']}")).json()["id"] == batch["id"]


async def test_a_failed_response_is_an_error_line_with_status_500(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    runner.fail_after = 2
    batch = await create_batch(client, jsonl([request_line("breaks")]))
    done = await advance_until(app_runtime, client, batch["id"])
    assert done["status"] == "completed" and done["output_file_id"] is None
    assert done["request_counts"] == {"total": 1, "completed": 0, "failed": 1}
    line = (await result_lines(client, done["error_file_id"]))["breaks"]
    assert line["response"]["status_code"] == 500 and line["error"] is None
    assert line["response"]["body"]["error"]["type"] == "server_error"
