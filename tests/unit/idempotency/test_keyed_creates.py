"""Idempotency-Key on the creates other than a response's: conversations and their items, files, batches, webhook
endpoints and API keys. The same key with the same request answers the first answer again, byte for byte (a key's
value and a signing secret included: kept sealed, never readable in the table), and makes nothing more; another
request is a 409; two at once make one."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from app.db.models import ConversationRow, IdempotencyKeyRow
from app.runtime import Runtime
from tests.protocol import assert_error

BOOT = {"authorization": "Bearer boot"}
Post = Callable[[httpx.AsyncClient, dict[str, str], str], Awaitable[httpx.Response]]
Count = Callable[[httpx.AsyncClient, Runtime], Awaitable[int]]


async def _conversation(client: httpx.AsyncClient, headers: dict[str, str], text: str) -> httpx.Response:
    body = {"metadata": {"topic": text}, "items": [{"role": "user", "content": text}]}
    return await client.post("/v1/conversations", json=body, headers=headers)


async def _conversations(client: httpx.AsyncClient, runtime: Runtime) -> int:
    async with runtime.database.read() as session:
        return int((await session.execute(select(func.count()).select_from(ConversationRow))).scalar_one())


async def _items(client: httpx.AsyncClient, headers: dict[str, str], text: str) -> httpx.Response:
    conversation = await _shared_conversation(client)
    body = {"items": [{"role": "user", "content": text}]}
    return await client.post(f"/v1/conversations/{conversation}/items", json=body, headers=headers)


async def _shared_conversation(client: httpx.AsyncClient) -> str:
    """One conversation per test's client, made at its first use, that the items are added to."""
    made: str = getattr(client, "_conversation_id", "")
    if not made:
        made = (await client.post("/v1/conversations", json={})).json()["id"]
        client._conversation_id = made  # type: ignore[attr-defined]
    return made


async def _items_count(client: httpx.AsyncClient, runtime: Runtime) -> int:
    conversation = await _shared_conversation(client)
    return len((await client.get(f"/v1/conversations/{conversation}/items")).json()["data"])


async def _file(client: httpx.AsyncClient, headers: dict[str, str], text: str) -> httpx.Response:
    line = {"custom_id": text, "method": "POST", "url": "/v1/responses", "body": {"input": text}}
    content = json.dumps(line).encode() + b"\n"
    # httpx draws a new multipart boundary for each request: the hash must not see it.
    return await client.post(
        "/v1/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"}, headers=headers
    )


async def _files(client: httpx.AsyncClient, runtime: Runtime) -> int:
    return len((await client.get("/v1/files")).json()["data"])


async def _batch(client: httpx.AsyncClient, headers: dict[str, str], text: str) -> httpx.Response:
    made = getattr(client, "_input_file_id", "")
    if not made:
        made = (await _file(client, {}, "input")).json()["id"]
        client._input_file_id = made  # type: ignore[attr-defined]
    body = {"input_file_id": made, "endpoint": "/v1/responses", "completion_window": "24h", "metadata": {"t": text}}
    return await client.post("/v1/batches", json=body, headers=headers)


async def _batches(client: httpx.AsyncClient, runtime: Runtime) -> int:
    return len((await client.get("/v1/batches")).json()["data"])


async def _endpoint(client: httpx.AsyncClient, headers: dict[str, str], text: str) -> httpx.Response:
    body = {"name": text, "url": "https://example.com/hook", "event_types": ["response.completed"]}
    return await client.post("/v1/webhook_endpoints", json=body, headers=headers)


async def _endpoints(client: httpx.AsyncClient, runtime: Runtime) -> int:
    return len((await client.get("/v1/webhook_endpoints")).json()["data"])


CREATES: dict[str, tuple[Post, Count]] = {
    "conversation": (_conversation, _conversations),
    "conversation items": (_items, _items_count),
    "file": (_file, _files),
    "batch": (_batch, _batches),
    "webhook endpoint": (_endpoint, _endpoints),
}


@pytest.mark.parametrize("kind", list(CREATES))
async def test_each_create_runs_once_for_its_key(client: httpx.AsyncClient, app_runtime: Runtime, kind: str) -> None:
    post, count = CREATES[kind]
    await post(client, {}, "warm-up")  # what the create needs (a conversation, an input file) exists first
    before = await count(client, app_runtime)
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    first = await post(client, headers, "first")
    again = await post(client, headers, "first")
    assert first.status_code == again.status_code == 200, again.text
    assert again.content == first.content and again.headers["Idempotent-Replayed"] == "true"
    assert await count(client, app_runtime) == before + 1
    other = await post(client, headers, "second")
    assert_error(other, 409, param="Idempotency-Key", code="idempotency_key_reused")
    assert await count(client, app_runtime) == before + 1
    # Without a key, the same request makes another each time.
    await post(client, {}, "first")
    assert await count(client, app_runtime) == before + 2


async def test_two_creates_at_once_make_one(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    headers = {"Idempotency-Key": "together"}
    replies = await asyncio.gather(*(_conversation(client, headers, "same") for _ in range(4)))
    assert {reply.status_code for reply in replies} == {200}
    assert len({reply.content for reply in replies}) == 1
    assert await _conversations(client, app_runtime) == 1


async def test_an_error_is_not_kept_and_the_key_runs_the_fixed_request(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    headers = {"Idempotency-Key": "fix-and-retry"}
    missing = await client.post(
        "/v1/conversations/conv_missing/items", json={"items": [{"role": "user", "content": "x"}]}, headers=headers
    )
    assert_error(missing, 404, param="conversation_id")
    async with app_runtime.database.read() as session:
        assert (await session.execute(select(func.count()).select_from(IdempotencyKeyRow))).scalar_one() == 0
    assert (await _conversation(client, headers, "now it works")).status_code == 200


@pytest.mark.settings(api_keys="boot", key_cache_ttl_s=0)
async def test_an_api_key_created_once_shows_the_same_value_to_its_retry_and_is_stored_sealed(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    headers = {**BOOT, "Idempotency-Key": "new-key"}
    body = {"project": "alpha", "name": "ci"}
    first = await client.post("/v1/keys", json=body, headers=headers)
    again = await client.post("/v1/keys", json=body, headers=headers)
    assert first.status_code == again.status_code == 200, first.text
    assert again.json() == first.json() and first.json()["value"]
    assert len((await client.get("/v1/keys", headers=BOOT)).json()["data"]) == 1
    async with app_runtime.database.read() as session:
        kept = (await session.execute(select(IdempotencyKeyRow.answer))).scalars().all()
    assert len(kept) == 1 and kept[0] is not None and first.json()["value"] not in kept[0]


async def test_a_signing_secret_is_kept_sealed(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    made: dict[str, Any] = (await _endpoint(client, {"Idempotency-Key": "hook"}, "hook")).json()
    async with app_runtime.database.read() as session:
        kept = (await session.execute(select(IdempotencyKeyRow.answer))).scalar_one()
    assert kept is not None and made["signing_secret"] not in kept
