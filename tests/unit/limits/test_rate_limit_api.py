"""Rate limits through the API: OpenAI's headers on /v1 responses, the 429 and its reset, tokens charged when a
generation is queued and corrected when it ends, tenants apart, WebSocket creates counted, and the SDK's retry."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from openai import AsyncOpenAI
from redis.exceptions import ConnectionError as RedisConnectionError

from app.config import Settings
from app.limits.buckets import BucketStep, Limit, Step
from app.limits.memory_store import MemoryBucketStore
from app.main import create_app
from app.runtime import Runtime
from app.tenants.identity import OPEN_TENANT
from app.testing.fakes import FAKE_REPLY, FakeClock, FakeRenderer, FakeRunner, fake_generation

HEADERS = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
)


@pytest.fixture
def clock(app_runtime: Runtime) -> FakeClock:
    """The app's buckets on a fake clock (the executor charges through the same limits object)."""
    fake = FakeClock()
    app_runtime.limits.store = MemoryBucketStore(fake)
    return fake


def create(client: httpx.AsyncClient, **fields: Any) -> Any:
    return client.post("/v1/responses", json={"model": "fake-model", "input": "Say hi.", **fields})


def remaining(response: httpx.Response, limit: str) -> int:
    return int(response.headers[f"x-ratelimit-remaining-{limit}"])


async def test_limits_that_are_off_send_no_headers(client: httpx.AsyncClient) -> None:
    response = await create(client)
    assert response.status_code == 200
    assert not [name for name in response.headers if name.startswith("x-ratelimit")]


@pytest.mark.settings(rate_limit_requests_per_min=3, rate_limit_tokens_per_min=10_000)
async def test_headers_count_down_then_a_429_until_the_bucket_refills(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    answers = [await create(client) for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    for answer in answers:
        assert all(name in answer.headers for name in HEADERS)
        assert answer.headers["x-ratelimit-limit-requests"] == "3"
        assert answer.headers["x-ratelimit-limit-tokens"] == "10000"
    assert [remaining(answer, "requests") for answer in answers] == [2, 1, 0]
    assert answers[2].headers["x-ratelimit-reset-requests"] == "1m0s"

    refused = await create(client)
    assert refused.status_code == 429
    assert refused.json() == {
        "error": {
            "message": refused.json()["error"]["message"],
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    assert "Limit 3, Used 3, Requested 1" in refused.json()["error"]["message"]
    assert refused.headers["retry-after"] == "20"
    assert refused.headers["retry-after-ms"] == "20000"
    assert remaining(refused, "requests") == 0
    # Reads do no work: not counted, not refused, and they show the same buckets.
    listed = await client.get("/v1/responses")
    assert listed.status_code == 200
    assert remaining(listed, "requests") == 0
    assert listed.headers["x-ratelimit-reset-requests"] == "1m0s"

    clock.now_s += 20
    again = await create(client)
    assert again.status_code == 200
    assert remaining(again, "requests") == 0
    clock.now_s += 60
    assert remaining(await client.get(f"/v1/responses/{again.json()['id']}"), "requests") == 3


@pytest.mark.settings(rate_limit_requests_per_min=1)
async def test_cancels_and_deletes_are_never_refused(
    client: httpx.AsyncClient, clock: FakeClock, runner: FakeRunner
) -> None:
    runner.delay_s = 0.2  # still running when it is cancelled
    created = await create(client, background=True)
    assert created.status_code == 200
    assert (await create(client)).status_code == 429
    response_id = created.json()["id"]
    cancelled = await client.post(f"/v1/responses/{response_id}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert remaining(cancelled, "requests") == 0
    again = await client.post(f"/v1/responses/{response_id}/cancel")  # idempotent, and never counted
    assert again.status_code == 200
    assert again.json()["status"] == "cancelled"
    assert (await client.delete(f"/v1/responses/{response_id}")).status_code == 200


@pytest.mark.settings(rate_limit_tokens_per_min=1000)
async def test_tokens_charged_for_the_prompt_then_corrected_by_the_output(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    answer = await create(client)
    usage = answer.json()["usage"]
    assert usage["output_tokens"] == len(FAKE_REPLY)
    # The headers are the admission's: the prompt was charged when the response was queued.
    assert remaining(answer, "tokens") == 1000 - usage["input_tokens"]
    assert "x-ratelimit-limit-requests" not in answer.headers  # only the limits that are on
    # Once it ended, its output was charged too.
    after = await client.get(f"/v1/responses/{answer.json()['id']}")
    assert remaining(after, "tokens") == 1000 - usage["total_tokens"]

    # A background response's output is charged where it ends, though nobody waits for it here.
    background = await create(client, background=True)
    assert remaining(background, "tokens") == 1000 - usage["total_tokens"] - usage["input_tokens"]
    for _ in range(200):
        polled = await client.get(f"/v1/responses/{background.json()['id']}")
        if polled.json()["status"] == "completed":
            break
        await asyncio.sleep(0.01)
    assert remaining(polled, "tokens") == 1000 - 2 * usage["total_tokens"]

    # input_tokens counts without generating: no tokens charged.
    counted = await client.post("/v1/responses/input_tokens", json={"model": "fake-model", "input": "Say hi."})
    assert counted.status_code == 200
    assert remaining(counted, "tokens") == 1000 - 2 * usage["total_tokens"]


@pytest.mark.settings(rate_limit_tokens_per_min=30)
async def test_a_prompt_the_bucket_does_not_hold_is_a_tokens_429(client: httpx.AsyncClient, clock: FakeClock) -> None:
    ten_words = "one two three four five six seven eight nine ten"
    first = await create(client, input=ten_words, max_output_tokens=16)
    assert first.status_code == 200
    used = first.json()["usage"]["total_tokens"]
    assert 30 - used < first.json()["usage"]["input_tokens"]  # what is left cannot hold the same prompt again
    refused = await create(client, input=ten_words, max_output_tokens=16)
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "tokens"
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(refused.headers["retry-after"]) >= 1
    listed = await client.get("/v1/responses")
    assert [item["id"] for item in listed.json()["data"]] == [first.json()["id"]]  # nothing of it stored
    clock.now_s += int(refused.headers["retry-after"])
    assert (await create(client, input=ten_words, max_output_tokens=16)).status_code == 200

    too_large = await create(client, input="word " * 40)
    assert too_large.status_code == 429
    assert too_large.headers["x-should-retry"] == "false"
    assert "retry-after" not in too_large.headers


async def test_two_tenants_have_limits_of_their_own(tmp_path: Path, runner: FakeRunner) -> None:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}",
        model_id="fake-model",
        api_keys="alpha,beta",
        rate_limit_requests_per_min=2,
        _env_file=None,
    )
    app = create_app(settings, fake_generation(FakeRenderer(), runner))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://t", headers={"authorization": "Bearer alpha"}) as a,
            httpx.AsyncClient(transport=transport, base_url="http://t", headers={"authorization": "Bearer beta"}) as b,
        ):
            assert [(await create(a)).status_code for _ in range(3)] == [200, 200, 429]
            first_of_b = await create(b)
            assert first_of_b.status_code == 200
            assert remaining(first_of_b, "requests") == 1
            # A refused key (no tenant) gets no headers: nothing is known of whose limits they would be.
            unknown = await a.get("/v1/responses", headers={"authorization": "Bearer nobody"})
            assert unknown.status_code == 401
            assert "x-ratelimit-remaining-requests" not in unknown.headers


@pytest.mark.settings(rate_limit_requests_per_min=30)
async def test_the_sdk_retries_after_the_wait_the_429_names(app: FastAPI, app_runtime: Runtime) -> None:
    statuses: list[int] = []

    async def spend_the_minute_first(request: httpx.Request) -> None:
        # Just before the first attempt, on the real clock: one request comes back every 2 s.
        if not statuses:
            spend = BucketStep(Limit.REQUESTS, 30, Step.CHARGE, 30)
            assert await app_runtime.limits.store.apply(OPEN_TENANT, [spend]) == (None, [0])

    async def seen(response: httpx.Response) -> None:
        statuses.append(response.status_code)
        if response.status_code == 429:
            await response.aread()
            assert 0 < int(response.headers["retry-after-ms"]) <= 2000
            assert response.headers["retry-after"] in ("1", "2")

    hooks = {"request": [spend_the_minute_first], "response": [seen]}
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), event_hooks=hooks)
    async with http, AsyncOpenAI(api_key="unused", base_url="http://t/v1", http_client=http, max_retries=1) as sdk:
        raw = await sdk.responses.with_raw_response.create(model="fake-model", input="Say hi.")
    assert statuses == [429, 200]
    assert raw.parse().output_text == " ".join(FAKE_REPLY)
    assert raw.headers["x-ratelimit-remaining-requests"] == "0"


@pytest.fixture
def socket_setup(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'ws.db'}",
        model_id="fake-model",
        rate_limit_requests_per_min=2,
        _env_file=None,
    )
    with TestClient(create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))) as client:
        yield client


def test_each_websocket_create_counts_as_a_request(socket_setup: TestClient) -> None:
    socket_setup.app.state.runtime.limits.store = MemoryBucketStore(FakeClock())  # type: ignore[attr-defined]
    with socket_setup.websocket_connect("/v1/responses") as socket:
        endings = []
        for _ in range(3):
            socket.send_text(json.dumps({"type": "response.create", "model": "fake-model", "input": "Say hi."}))
            while True:
                event = json.loads(socket.receive_text())
                if event["type"] in ("response.completed", "error"):
                    endings.append(event)
                    break
    assert [event["type"] for event in endings] == ["response.completed", "response.completed", "error"]
    assert endings[2]["status"] == 429
    assert endings[2]["error"]["type"] == "requests"
    assert endings[2]["error"]["code"] == "rate_limit_exceeded"


@pytest.mark.settings(rate_limit_requests_per_min=2)
async def test_conversation_writes_count_and_their_reads_do_not(client: httpx.AsyncClient, clock: FakeClock) -> None:
    created = await client.post("/v1/conversations", json={})
    assert remaining(created, "requests") == 1
    conversation_id = created.json()["id"]
    items = await client.post(
        f"/v1/conversations/{conversation_id}/items", json={"items": [{"role": "user", "content": "Hi."}]}
    )
    assert items.status_code == 200
    assert remaining(items, "requests") == 0
    assert (await client.post("/v1/conversations", json={})).status_code == 429
    read = await client.get(f"/v1/conversations/{conversation_id}/items")
    assert read.status_code == 200
    assert remaining(read, "requests") == 0


@pytest.mark.settings(rate_limit_tokens_per_min=1000)
async def test_a_compaction_is_charged_its_prompt_and_its_summary(client: httpx.AsyncClient, clock: FakeClock) -> None:
    compacted = await client.post(
        "/v1/responses/compact",
        json={"model": "fake-model", "input": [{"role": "user", "content": "Remember the number 42, please."}]},
    )
    assert compacted.status_code == 200, compacted.text
    usage = compacted.json()["usage"]
    assert usage["output_tokens"] > 0
    # The summary's prompt when it was queued, its output when it ended.
    assert remaining(await client.get("/v1/models"), "tokens") == 1000 - usage["input_tokens"] - usage["output_tokens"]


class DownStore:
    """A store whose Redis is unreachable."""

    async def apply(self, tenant: str, steps: Any) -> tuple[int | None, list[float]]:
        raise RedisConnectionError("Connection refused")

    async def close(self) -> None:
        return None


@pytest.mark.settings(rate_limit_requests_per_min=10)
async def test_with_its_store_down_work_is_a_503_and_reads_go_on_without_headers(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    app_runtime.limits.store = DownStore()
    refused = await create(client)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "rate_limiter_unavailable"
    listed = await client.get("/v1/responses")
    assert listed.status_code == 200
    assert listed.json()["data"] == []  # nothing was stored
    assert "x-ratelimit-remaining-requests" not in listed.headers
