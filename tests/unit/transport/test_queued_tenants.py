"""Distributed mode's queued jobs by tenant and class, on real Redis (RESPONSES_TEST_REDIS_URL): what waits in a
model's queue is counted by tenant and class; a job a worker has taken is not, nor one that has left the queue,
and the index that names the tenants shrinks with the queue."""

from __future__ import annotations

from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix

from app.generation.job import GenerationJob, JobClass
from app.generation.types import SamplingParams
from app.transport.queued_tenants import index_key
from app.transport.redis_queue import ArqQueue, model_queue
from tests.unit.transport.arq_runs import run_queue

MODELS = ("small", "big")


def job(name: str, tenant: str, job_class: JobClass, model: str = "small") -> GenerationJob:
    sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=4)
    return GenerationJob(name, [1], sampling, {}, True, False, tenant=tenant, model=model, job_class=job_class)


async def test_waiting_jobs_are_counted_by_tenant_and_class_across_the_models(pool: ArqRedis) -> None:
    queue = ArqQueue(pool)
    for item in (
        job("resp_a1", "project:a", "background"),
        job("resp_a2", "project:a", "background"),
        job("resp_a3", "project:a", "interactive", model="big"),
        job("resp_b1", "project:b", "batch"),
        job("resp_b2", "project:b", "background", model="big"),
    ):
        await queue.enqueue(item)
    await queue.enqueue(job("resp_a1", "project:a", "background"))  # already queued: counted once
    assert await queue.queued_by_tenant(MODELS) == {
        ("project:a", "background"): 2,
        ("project:a", "interactive"): 1,
        ("project:b", "batch"): 1,
        ("project:b", "background"): 1,
    }


async def test_taken_and_gone_jobs_are_not_counted_and_leave_the_index(pool: ArqRedis) -> None:
    queue = ArqQueue(pool)
    for number in range(3):
        await queue.enqueue(job(f"resp_a{number}", "project:a", "background"))
    await queue.enqueue(job("resp_b0", "project:b", "batch"))
    # A worker took resp_a0 (arq keeps it in the queue until it ends), and resp_a1 ended.
    await pool.set(in_progress_key_prefix + "resp_a0", b"1")
    await pool.zrem(model_queue("small"), "resp_a1")
    assert await queue.queued_by_tenant(MODELS) == {("project:a", "background"): 1, ("project:b", "batch"): 1}
    assert await pool.zcard(index_key(model_queue("small"))) == 3  # resp_a1's entry is dropped
    await pool.delete(in_progress_key_prefix + "resp_a0")

    assert sorted(await run_queue(pool, "small")) == ["resp_a0", "resp_a2", "resp_b0"]
    assert await queue.queued_by_tenant(MODELS) == {}
    assert await pool.zcard(index_key(model_queue("small"))) == 0


async def test_the_index_is_trimmed_as_the_queue_is_served_without_a_scrape(pool: ArqRedis) -> None:
    queue = ArqQueue(pool)
    for number in range(5):
        await queue.enqueue(job(f"resp_a{number}", "project:a", "background"))
    await run_queue(pool, "small")
    await queue.enqueue(job("resp_next", "project:b", "background"))
    # Every entry below the oldest job left or above the newest went with the enqueue: only the new one is named.
    assert await pool.zrange(index_key(model_queue("small")), 0, -1) == [b"resp_next project:b"]


async def test_a_requeued_job_is_counted_once(pool: ArqRedis) -> None:
    queue = ArqQueue(pool)
    lost = job("resp_lost", "project:a", "interactive")
    await queue.enqueue(lost)
    await queue.requeue(lost, previous_owner=None)
    assert await queue.queued_by_tenant(MODELS) == {("project:a", "interactive"): 1}
