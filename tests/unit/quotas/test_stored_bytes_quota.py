"""The stored-bytes quota in-process: a tenant at its limit is refused (429 `insufficient_quota`) every write that
stores data (a stored create, background or streamed; an upload; a conversation's create and items; a batch, and
its lines), while `store: false` creates, reads and deletes pass; a delete frees space at the next measurement;
writes are charged at once, so that a burst stops at the limit; GET /v1/usage/storage shows it."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from app.db.models import FileRow
from app.quotas.stored_bytes import measure_stored_bytes
from app.runtime import Runtime
from app.tenants.identity import OPEN_TENANT
from tests.unit.batches.batch_files import advance_until, jsonl, request_line, result_lines
from tests.unit.keys.test_keys_api import BOOT, bearer, make_key

LIMIT = 20_000
QUOTA = pytest.mark.settings(max_stored_bytes_per_tenant=LIMIT)


async def store_big_file(runtime: Runtime, size: int, tenant: str = OPEN_TENANT) -> str:
    """A file of `size` bytes stored as if uploaded (its row alone: the measure counts a file by its size), then a
    measurement: the tenant's counter says what it stores."""
    async with runtime.database.transaction() as session:
        session.add(FileRow(id="file_big", tenant=tenant, purpose="batch", filename="big", bytes=size))
    await measure_stored_bytes(runtime.database)
    return "file_big"


def assert_quota_refusal(reply: httpx.Response, limit: int = LIMIT) -> None:
    assert reply.status_code == 429, reply.text
    error = reply.json()["error"]
    assert error["type"] == "insufficient_quota" and error["code"] == "insufficient_quota"
    assert f"of the {limit} allowed" in error["message"]
    assert "retry-after" not in reply.headers  # waiting frees nothing


async def upload(client: httpx.AsyncClient, data: bytes) -> httpx.Response:
    return await client.post("/v1/files", files={"file": ("in.jsonl", data)}, data={"purpose": "batch"})


async def storage(client: httpx.AsyncClient, **headers: str) -> dict[str, Any]:
    reply = await client.get("/v1/usage/storage", headers=headers)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


@QUOTA
async def test_every_write_that_stores_data_is_refused_at_the_quota(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    conversation = (await client.post("/v1/conversations", json={})).json()
    stored = (await client.post("/v1/responses", json={"input": "before"})).json()
    input_file = (await upload(client, jsonl([request_line("a")]))).json()["id"]
    await store_big_file(app_runtime, LIMIT)

    assert_quota_refusal(await client.post("/v1/responses", json={"input": "hi"}))
    assert_quota_refusal(await client.post("/v1/responses", json={"input": "hi", "background": True}))
    assert_quota_refusal(await client.post("/v1/responses", json={"input": "hi", "stream": True}))
    assert_quota_refusal(await upload(client, b"{}\n"))
    assert_quota_refusal(await client.post("/v1/conversations", json={}))
    item = {"type": "message", "role": "user", "content": "more"}
    assert_quota_refusal(await client.post(f"/v1/conversations/{conversation['id']}/items", json={"items": [item]}))
    batch = {"input_file_id": input_file, "endpoint": "/v1/responses", "completion_window": "24h"}
    assert_quota_refusal(await client.post("/v1/batches", json=batch))
    # The SDK reads it as OpenAI's spent quota.
    sdk = openai.AsyncOpenAI(api_key="unused", base_url="http://test/v1", http_client=client, max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused:
        await sdk.responses.create(model="fake-model", input="hi")
    assert refused.value.code == "insufficient_quota"

    # Nothing of the refused writes was stored.
    assert [response["id"] for response in (await client.get("/v1/responses")).json()["data"]] == [stored["id"]]
    assert len((await client.get(f"/v1/conversations/{conversation['id']}/items")).json()["data"]) == 0
    # Unstored creates, and reads, pass.
    unstored = await client.post("/v1/responses", json={"input": "hi", "store": False})
    assert unstored.status_code == 200 and unstored.json()["status"] == "completed"
    assert (await client.get(f"/v1/responses/{stored['id']}")).status_code == 200
    assert (await client.get(f"/v1/files/{input_file}/content")).status_code == 200


@QUOTA
async def test_deletes_pass_and_free_space_at_the_next_measurement(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    stored = (await client.post("/v1/responses", json={"input": "kept a while"})).json()
    big = await store_big_file(app_runtime, LIMIT + 1)
    assert_quota_refusal(await client.post("/v1/responses", json={"input": "hi"}))

    assert (await client.delete(f"/v1/responses/{stored['id']}")).status_code == 200
    assert (await client.delete(f"/v1/files/{big}")).status_code == 200
    # Counted until measured: a deletion is seen at the next measurement, not at once.
    assert (await storage(client))["stored_bytes"] > LIMIT
    assert_quota_refusal(await client.post("/v1/responses", json={"input": "hi"}))

    await measure_stored_bytes(app_runtime.database)
    assert (await storage(client))["stored_bytes"] == 0
    again = await client.post("/v1/responses", json={"input": "hi"})
    assert again.status_code == 200, again.text


@pytest.mark.settings(max_stored_bytes_per_tenant=3000)
async def test_writes_are_charged_at_once_so_that_a_burst_stops_at_the_limit(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    data = b"x" * 1000
    for _ in range(2):
        assert (await upload(client, data)).status_code == 200
    # 2 x (1000 bytes + the 8 of its name): no measurement in between, and a third would pass 3000.
    assert (await storage(client))["stored_bytes"] == 2016
    third = await upload(client, data)
    assert_quota_refusal(third, limit=3000)
    assert "would add about 1008 more" in third.json()["error"]["message"]
    assert (await upload(client, b"x" * 900)).status_code == 200  # what still fits is taken
    # The measurement counts what the charges did.
    await measure_stored_bytes(app_runtime.database)
    assert (await storage(client))["stored_bytes"] == 2016 + 908


async def test_without_a_limit_nothing_is_refused_and_the_measure_still_shows(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    await store_big_file(app_runtime, 10**12)
    assert (await client.post("/v1/responses", json={"input": "hi"})).status_code == 200
    shown = await storage(client)
    assert shown["project"] == OPEN_TENANT and shown["limit_bytes"] is None
    assert shown["stored_bytes"] == 10**12 + len("big") and shown["measured_at"] is not None
    # Uncharged while there is no limit: the response counts from the next measurement.
    await measure_stored_bytes(app_runtime.database)
    assert (await storage(client))["stored_bytes"] > 10**12 + len("big")


@QUOTA
async def test_a_batch_line_past_the_quota_becomes_an_error_line(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    input_file = (await upload(client, jsonl([request_line("a"), request_line("b")]))).json()["id"]
    body = {"input_file_id": input_file, "endpoint": "/v1/responses", "completion_window": "24h"}
    batch = (await client.post("/v1/batches", json=body)).json()
    await store_big_file(app_runtime, LIMIT)

    done = await advance_until(app_runtime, client, batch["id"])

    assert done["request_counts"] == {"total": 2, "completed": 0, "failed": 2}
    errors = await result_lines(client, done["error_file_id"])
    for line in errors.values():
        assert line["response"]["status_code"] == 429
        assert line["response"]["body"]["error"]["code"] == "insufficient_quota"


@pytest.mark.settings(api_keys="boot", key_cache_ttl_s=0, max_stored_bytes_per_tenant=LIMIT)
async def test_storage_usage_a_member_reads_its_own_and_an_admin_any(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    alpha = (await make_key(client, "alpha"))["value"]
    await make_key(client, "beta")
    uploaded = await client.post(
        "/v1/files", files={"file": ("f", b"x" * 100)}, data={"purpose": "batch"}, headers=bearer(alpha)
    )
    assert uploaded.status_code == 200
    mine = await storage(client, **bearer(alpha))
    assert mine["project"].startswith("project:") and mine["object"] == "usage.storage"
    assert mine["stored_bytes"] == 101 and mine["limit_bytes"] == LIMIT and mine["measured_at"] is None
    refused = await client.get("/v1/usage/storage", params={"project": "beta"}, headers=bearer(alpha))
    assert refused.status_code == 403
    by_admin = (await client.get("/v1/usage/storage", params={"project": "alpha"}, headers=BOOT)).json()
    assert by_admin == mine
    beta = (await client.get("/v1/usage/storage", params={"project": "beta"}, headers=BOOT)).json()
    assert beta["stored_bytes"] == 0 and beta["limit_bytes"] == LIMIT
    assert (await client.get("/v1/usage/storage")).status_code == 401


@pytest.mark.settings(api_keys="boot", key_cache_ttl_s=0)
async def test_a_project_s_own_limit_applies_where_the_server_sets_none(client: httpx.AsyncClient) -> None:
    alpha = await make_key(client, "alpha")
    beta = (await make_key(client, "beta"))["value"]
    limited = await client.post(
        f"/v1/projects/{alpha['project_id']}/limits", json={"max_stored_bytes": 150}, headers=BOOT
    )
    assert limited.status_code == 200, limited.text
    files = {"file": ("f", b"x" * 100)}
    assert (
        await client.post("/v1/files", files=files, data={"purpose": "batch"}, headers=bearer(alpha["value"]))
    ).status_code == 200
    refused = await client.post("/v1/files", files=files, data={"purpose": "batch"}, headers=bearer(alpha["value"]))
    assert_quota_refusal(refused, limit=150)
    assert (await storage(client, **bearer(alpha["value"])))["limit_bytes"] == 150
    # Another project keeps the server's (none).
    for _ in range(3):
        assert (
            await client.post("/v1/files", files=files, data={"purpose": "batch"}, headers=bearer(beta))
        ).status_code == 200
    assert (await storage(client, **bearer(beta)))["limit_bytes"] is None


@pytest.mark.settings(max_stored_bytes_per_tenant=30_000)
async def test_store_false_turns_on_a_conversation_are_charged_and_refused_at_the_quota(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    """Issue 37: a project at its quota stored 4 x 12 KB more through `store: false` turns on a conversation, which
    keeps their items. Each turn's input is charged as a stored turn's is: the third passes the limit and is refused,
    and the conversation keeps nothing of it."""
    conversation = (await client.post("/v1/conversations", json={})).json()
    turn = {"input": "y" * 12_000, "store": False, "conversation": conversation["id"]}
    replies = [await client.post("/v1/responses", json=turn) for _ in range(4)]
    assert [reply.status_code for reply in replies[:2]] == [200, 200]
    for reply in replies[2:]:
        assert_quota_refusal(reply, limit=30_000)
    assert (await storage(client))["stored_bytes"] > 24_000
    items = (await client.get(f"/v1/conversations/{conversation['id']}/items", params={"limit": 100})).json()["data"]
    assert len(items) == 4  # two turns: each its input and its answer
