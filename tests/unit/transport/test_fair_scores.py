"""Distributed mode's fair order, on real Redis (RESPONSES_TEST_REDIS_URL): the scores a model's queue gets are
all in the past (never deferred), and an arq worker takes its jobs in the embedded order's turns (each tenant's
jobs of a class a flow, the flows in turn by their classes' weights, a tie to the more urgent class), each tenant's
in order, whatever order they were enqueued in."""

from __future__ import annotations

import time

from arq.connections import ArqRedis

from app.generation.job import ClassWeights, GenerationJob, JobClass
from app.generation.types import SamplingParams
from app.transport.fair_scores import BAND_ROUNDS, FIRST_SCORE_MS, class_of_score
from app.transport.redis_queue import ArqQueue, model_queue
from tests.unit.transport.arq_runs import run_queue

MODEL = "fair-model"
SHORT = {"interactive": "int", "background": "bg", "batch": "batch"}


def job(tenant: str, job_class: JobClass, number: int) -> GenerationJob:
    sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=4)
    name = f"resp_{tenant}_{SHORT[job_class]}{number}"
    return GenerationJob(name, [1], sampling, {}, True, False, tenant=tenant, model=MODEL, job_class=job_class)


async def test_jobs_are_taken_by_flows_in_turn_a_tie_to_the_more_urgent_class(pool: ArqRedis) -> None:
    queue = ArqQueue(pool)
    enqueued = [
        *(job("a", "background", number) for number in range(3)),
        job("a", "batch", 0),
        *(job("b", "background", number) for number in range(2)),
        job("b", "interactive", 0),
        *(job("a", "interactive", number) for number in range(2)),
        job("c", "batch", 0),
    ]
    for item in enqueued:
        await queue.enqueue(item)
    scores = dict(await pool.zrange(model_queue(MODEL), 0, -1, withscores=True))
    assert len(scores) == len(enqueued)
    assert all(score <= time.time() * 1000 for score in scores.values())  # none is deferred
    for item in enqueued:  # each in the fair scores, its class readable from its score
        score = scores[item.response_id.encode()]
        assert FIRST_SCORE_MS <= score < FIRST_SCORE_MS + BAND_ROUNDS
        assert class_of_score(score) == item.job_class
    # Every flow's first job shares the first tag, the more urgent class first; a tie within a class (two
    # tenants' jobs of one tag) goes by id, as Redis sorts equal scores.
    assert await run_queue(pool, MODEL, max_jobs=1) == [
        "resp_a_int0",
        "resp_b_int0",
        "resp_a_bg0",
        "resp_b_bg0",
        "resp_a_batch0",
        "resp_c_batch0",
        "resp_a_int1",
        "resp_a_bg1",
        "resp_b_bg1",
        "resp_a_bg2",
    ]


async def test_a_flood_of_interactive_jobs_leaves_another_tenants_background_work_its_share(pool: ArqRedis) -> None:
    """Issue 37: the workers' pick serves the embedded order's turns, so tenant X's interactive flood no longer
    takes every turn from tenant Y's background work (every other one at equal weights, one in four at 3 to 1)."""
    for weights, expected in ((ClassWeights(interactive=2, background=2), 6), (ClassWeights(3, 1), 3)):
        await pool.flushdb()
        queue = ArqQueue(pool, weights)
        for number in range(8):
            await queue.enqueue(job("y", "background", number))
        for number in range(30):
            await queue.enqueue(job("x", "interactive", number))
        taken = (await run_queue(pool, MODEL, max_jobs=1))[:12]
        assert sum(name.startswith("resp_y") for name in taken) == expected


async def test_a_tenant_behind_a_backlog_waits_for_one_job_of_it(pool: ArqRedis) -> None:
    queue = ArqQueue(pool)
    for number in range(50):
        await queue.enqueue(job("a", "background", number))
    # A worker ran (and arq removed) a's first ten: the round being served is a's eleventh job's.
    served = await pool.zrange(model_queue(MODEL), 0, 9)
    await pool.zrem(model_queue(MODEL), *served)
    await queue.enqueue(job("b", "background", 0))
    await queue.enqueue(job("b", "background", 1))
    order = await run_queue(pool, MODEL, max_jobs=1)
    assert order[:4] == ["resp_a_bg10", "resp_b_bg0", "resp_a_bg11", "resp_b_bg1"]
    assert order[4:] == [f"resp_a_bg{number}" for number in range(12, 50)]


async def test_an_empty_queue_starts_its_clock_again(pool: ArqRedis) -> None:
    queue = ArqQueue(pool)
    for number in range(3):
        await queue.enqueue(job("a", "background", number))
    assert len(await run_queue(pool, MODEL, max_jobs=1)) == 3
    # Everything was served: no flow waits, none is owed a turn, so the clock starts again (the scores never creep
    # towards the present): a's past backlog is held against neither a nor a newcomer.
    await queue.enqueue(job("a", "background", 3))
    await queue.enqueue(job("b", "background", 0))
    scores = dict(await pool.zrange(model_queue(MODEL), 0, -1, withscores=True))
    first_background = FIRST_SCORE_MS + 1
    assert scores == {b"resp_a_bg3": first_background, b"resp_b_bg0": first_background}
    assert await run_queue(pool, MODEL, max_jobs=1) == ["resp_a_bg3", "resp_b_bg0"]
    await queue.enqueue(job("c", "background", 0))
    assert await pool.zscore(model_queue(MODEL), "resp_c_bg0") == first_background


async def test_a_requeued_job_is_scored_fairly_too(pool: ArqRedis) -> None:
    queue = ArqQueue(pool)
    for number in range(3):
        await queue.enqueue(job("a", "background", number))
    await queue.requeue(job("b", "interactive", 0), None)
    await queue.requeue(job("a", "background", 0), "worker_gone")
    assert await run_queue(pool, MODEL, max_jobs=1) == ["resp_b_int0", "resp_a_bg1", "resp_a_bg2", "resp_a_bg0"]
