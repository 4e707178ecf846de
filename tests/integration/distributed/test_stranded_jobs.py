"""A job sent by affinity to a worker's own queue never waits there for a worker that will not take it (real
Redis, no model): affinity picks only a worker whose heartbeat is fresh and that is not draining, and
`release_stranded` moves what waits in the queue of a worker that is gone, draining, or slow to claim it back to
its model's queue, whole (arq's record with it), for any worker to take."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator

import pytest
from arq.connections import ArqRedis, create_pool
from arq.constants import in_progress_key_prefix

from app.generation.job import GenerationJob
from app.generation.types import SamplingParams
from app.transport import redis_queue
from app.transport.redis_queue import (
    WORKER_TTL_S,
    ArqQueue,
    affinity_owner_key,
    mark_draining,
    model_queue,
    redis_settings,
    register_worker,
    worker_queue,
)

pytestmark = pytest.mark.integration

REDIS_URL = os.environ.get("RESPONSES_TEST_STRANDED_REDIS_URL", "redis://127.0.0.1:6379/13")
MODEL = "stranded-model"
HOME = "worker_home"


@pytest.fixture
async def pool() -> AsyncIterator[ArqRedis]:
    made = await create_pool(redis_settings(REDIS_URL))
    await made.flushdb()
    yield made
    await made.flushdb()
    await made.aclose()


def job(number: int) -> GenerationJob:
    sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=4)
    return GenerationJob(
        f"resp_stranded_{number}", [1, 2], sampling, {}, True, False, tenant="t", model=MODEL, affinity_key="chain"
    )


async def beat_at(pool: ArqRedis, worker_id: str, seconds_ago: float) -> None:
    """Register the worker as if its last heartbeat was `seconds_ago`."""
    await register_worker(pool, worker_id, [MODEL], WORKER_TTL_S - seconds_ago)


async def where(pool: ArqRedis, response_id: str) -> list[str]:
    return [queue for queue in (model_queue(MODEL), worker_queue(HOME)) if await pool.zscore(queue, response_id)]


async def test_affinity_sends_a_job_only_to_a_fresh_worker_that_is_not_draining(pool: ArqRedis) -> None:
    queue = ArqQueue(pool)
    await pool.set(affinity_owner_key("t", MODEL, "chain"), HOME)
    await beat_at(pool, HOME, seconds_ago=1)
    await queue.enqueue(job(1))
    assert await where(pool, "resp_stranded_1") == [worker_queue(HOME)]
    # Killed a few seconds ago: registered (the TTL is 15 s), but its heartbeat is stale.
    await beat_at(pool, HOME, seconds_ago=redis_queue.WORKER_FRESH_S + 1)
    assert await queue.live_workers(MODEL) == 1
    await queue.enqueue(job(2))
    assert await where(pool, "resp_stranded_2") == [model_queue(MODEL)]
    await beat_at(pool, HOME, seconds_ago=0)
    await mark_draining(pool, HOME, 60)
    await queue.enqueue(job(3))
    assert await where(pool, "resp_stranded_3") == [model_queue(MODEL)]


async def test_the_queue_of_a_worker_that_is_gone_is_moved_to_its_models_queue(pool: ArqRedis) -> None:
    queue = ArqQueue(pool)
    await pool.set(affinity_owner_key("t", MODEL, "chain"), HOME)
    await beat_at(pool, HOME, seconds_ago=0)
    for number in (1, 2):
        await queue.enqueue(job(number))
    assert await queue.release_stranded() == 0  # its worker is alive and the jobs are new: they stay
    await beat_at(pool, HOME, seconds_ago=redis_queue.WORKER_FRESH_S + 1)
    assert await queue.release_stranded() == 2
    for number in (1, 2):
        assert await where(pool, f"resp_stranded_{number}") == [model_queue(MODEL)]
        assert await queue.job_is_waiting(f"resp_stranded_{number}")  # arq's record came along
    assert await pool.zcard(worker_queue(HOME)) == 0


async def test_a_job_a_live_worker_does_not_claim_in_time_goes_to_any_worker(pool: ArqRedis) -> None:
    queue = ArqQueue(pool)
    await pool.set(affinity_owner_key("t", MODEL, "chain"), HOME)
    await beat_at(pool, HOME, seconds_ago=0)
    await queue.enqueue(job(1))
    # Enqueued longer ago than a worker gets to claim it (arq scores a queued job with its enqueue time, in ms).
    waited_ms = (time.time() - redis_queue.AFFINITY_CLAIM_S - 1) * 1000
    await pool.zadd(worker_queue(HOME), {"resp_stranded_1": waited_ms}, xx=True)
    assert await queue.release_stranded() == 1
    assert await where(pool, "resp_stranded_1") == [model_queue(MODEL)]


async def test_keys_beside_a_worker_queue_are_not_taken_for_one(pool: ArqRedis) -> None:
    await pool.set(f"{worker_queue(HOME)}:health-check", "arq's own")
    assert await ArqQueue(pool).release_stranded() == 0


async def test_a_job_running_in_a_worker_queue_is_not_taken_for_a_waiting_one(pool: ArqRedis) -> None:
    queue = ArqQueue(pool)
    await pool.set(affinity_owner_key("t", MODEL, "chain"), HOME)
    await beat_at(pool, HOME, seconds_ago=0)
    await queue.enqueue(job(1))
    # Its worker runs it (arq keeps it in the queue until it ends), for longer than a claim takes.
    await pool.set(f"{in_progress_key_prefix}resp_stranded_1", b"1")
    waited_ms = (time.time() - redis_queue.AFFINITY_CLAIM_S - 1) * 1000
    await pool.zadd(worker_queue(HOME), {"resp_stranded_1": waited_ms}, xx=True)
    assert await queue.release_stranded() == 0
    await beat_at(pool, HOME, seconds_ago=redis_queue.WORKER_FRESH_S + 1)  # and when it died running it
    assert await queue.release_stranded() == 0
    assert await where(pool, "resp_stranded_1") == [worker_queue(HOME)]
