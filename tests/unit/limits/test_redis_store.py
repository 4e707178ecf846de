"""The Redis backend: one atomic script shared by every node (two limiters over one Redis), the same arithmetic as
the in-process store, keys that expire, and a 503 when Redis is down."""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from app.config import Settings
from app.errors import RateLimited, ServiceUnavailable
from app.generation.job import GenerationJob
from app.generation.types import SamplingParams
from app.jobs.executor import JobExecutor
from app.limits.buckets import BucketStep, Limit, Step
from app.limits.limiter import BucketStore, TenantRateLimits
from app.limits.memory_store import MemoryBucketStore
from app.limits.redis_store import RedisBucketStore, bucket_key
from app.main import build_rate_limits
from app.runtime import Runtime
from app.testing.fakes import FakeClock, FakeRunner
from app.transport.memory_bus import MemoryBus

REDIS_URL = os.environ.get("RESPONSES_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis.from_url(REDIS_URL)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def tenant() -> str:
    """A tenant of this test only (the database is shared with other tests)."""
    return f"key:{uuid.uuid4().hex}"


async def test_two_nodes_share_one_tenants_buckets(redis: Redis, tenant: str) -> None:
    clock = FakeClock()
    nodes = [
        TenantRateLimits(RedisBucketStore(Redis.from_url(REDIS_URL), clock=clock, owned=True), requests_per_min=4)
        for _ in range(2)
    ]
    try:
        seen = [(await nodes[index % 2].admit_request(tenant)).headers() for index in range(4)]
        assert [headers["x-ratelimit-remaining-requests"] for headers in seen] == ["3", "2", "1", "0"]
        for node in nodes:
            with pytest.raises(RateLimited) as refused:
                await node.admit_request(tenant)
            assert refused.value.headers["retry-after"] == "15"
        clock.now_s += 15
        await nodes[1].admit_request(tenant)
        with pytest.raises(RateLimited):
            await nodes[0].admit_request(tenant)
        # Another tenant is untouched.
        assert (await nodes[0].admit_request(tenant + "x")).headers()["x-ratelimit-remaining-requests"] == "3"
    finally:
        for node in nodes:
            await node.close()


async def test_keys_expire_once_the_bucket_would_be_full(redis: Redis, tenant: str) -> None:
    clock = FakeClock()
    limits = TenantRateLimits(RedisBucketStore(redis, clock=clock), requests_per_min=60, tokens_per_min=600)
    await limits.admit_request(tenant)
    await limits.admit_tokens(tenant, 300)
    requests_ttl = await redis.pttl(bucket_key(tenant, "requests"))
    tokens_ttl = await redis.pttl(bucket_key(tenant, "tokens"))
    assert 1000 < requests_ttl <= 2000  # one request back in 1 s, plus a second's margin
    assert 30_000 < tokens_ttl <= 31_000
    # A bucket given back to full is deleted: absent means full.
    await limits.charge_tokens(tenant, -300)
    assert not await redis.exists(bucket_key(tenant, "tokens"))


async def test_redis_and_memory_stores_agree_step_for_step(redis: Redis, tenant: str) -> None:
    clock = FakeClock()
    stores: list[BucketStore] = [MemoryBucketStore(clock), RedisBucketStore(redis, clock=clock)]
    chosen = random.Random(27)
    for _ in range(200):
        clock.now_s += chosen.choice([0, 0, 0.05, 0.5, 3, 20])
        steps = [
            BucketStep(Limit.REQUESTS, 10, chosen.choice(list(Step)), 1),
            BucketStep(Limit.TOKENS, 500, chosen.choice(list(Step)), chosen.choice([0, 7, 120, -40, 600])),
        ]
        memory, shared = [await store.apply(tenant, steps) for store in stores]
        assert memory[0] == shared[0]
        assert memory[1] == pytest.approx(shared[1], abs=0.01)


async def test_redis_down_refuses_work_with_a_503() -> None:
    limits = TenantRateLimits(RedisBucketStore.connect("redis://127.0.0.1:1/0"), requests_per_min=10)
    try:
        with pytest.raises(ServiceUnavailable) as refused:
            await limits.admit_request("key:x")
        assert refused.value.code == "rate_limiter_unavailable"
    finally:
        await limits.close()


async def test_distributed_mode_keeps_its_buckets_in_redis() -> None:
    distributed = build_rate_limits(Settings(redis_url=REDIS_URL, rate_limit_requests_per_min=5, _env_file=None))
    # Every limit off on the server: in Redis still (a project may set its own), connected on the first use only.
    unlimited = build_rate_limits(Settings(redis_url=REDIS_URL, _env_file=None))
    embedded = build_rate_limits(Settings(_env_file=None))
    try:
        assert isinstance(distributed.store, RedisBucketStore)
        assert (await distributed.policy.limits_of("key:x")).requests_per_min == 5
        assert isinstance(unlimited.store, RedisBucketStore)
        assert isinstance(embedded.store, MemoryBucketStore)
        assert not (await embedded.policy.limits_of("key:x")).rate_limited
    finally:
        await distributed.close()
        await unlimited.close()


async def test_on_redis_own_clock(redis: Redis, tenant: str) -> None:
    """Without an injected clock the script reads Redis's TIME: the production path."""
    limits = TenantRateLimits(RedisBucketStore(redis), requests_per_min=2)
    first = await limits.admit_request(tenant)
    second = await limits.admit_request(tenant)
    assert [first.headers()["x-ratelimit-remaining-requests"], second.headers()["x-ratelimit-remaining-requests"]] == [
        "1",
        "0",
    ]
    with pytest.raises(RateLimited) as refused:
        await limits.admit_request(tenant)
    assert 29_000 < int(refused.value.headers["retry-after-ms"]) <= 30_000
    assert refused.value.headers["retry-after"] == "30"


async def test_a_workers_output_is_charged_to_the_bucket_the_api_nodes_read(
    redis: Redis, tenant: str, app_runtime: Runtime
) -> None:
    """Distributed mode: an API node charges the prompt, the worker that ran the job its output, in one bucket."""
    clock = FakeClock()
    api_node = TenantRateLimits(RedisBucketStore(redis, clock=clock), tokens_per_min=1000)
    worker = TenantRateLimits(RedisBucketStore(Redis.from_url(REDIS_URL), clock=clock, owned=True), tokens_per_min=1000)
    sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=4)
    response = {"id": "resp_charged", "model": "fake-model", "object": "response", "created_at": 0, "status": "queued"}
    job = GenerationJob(
        "resp_charged", [1] * 25, sampling, response=response, store=False, keep_events=False, tenant=tenant
    )
    try:
        await api_node.admit_tokens(tenant, len(job.prompt_tokens))
        executor = JobExecutor(
            FakeRunner(), app_runtime.database, MemoryBus(), owner="worker_x", charge_tokens=worker.charge_tokens
        )
        await executor.execute(GenerationJob.from_payload(json.loads(json.dumps(job.to_payload()))))
        assert (await api_node.peek(tenant)).headers()["x-ratelimit-remaining-tokens"] == str(1000 - 25 - 4)
    finally:
        await worker.close()
