"""Distributed mode's queues on real Redis (RESPONSES_TEST_REDIS_URL), for the tests of this package: an emptied
pool, and what an arq worker of a model runs until its queue is empty."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from arq import func
from arq.connections import ArqRedis, create_pool
from arq.worker import Worker

from app.transport.redis_queue import GENERATE_TASK, model_queue, redis_settings

REDIS_URL = os.environ.get("RESPONSES_TEST_REDIS_URL", "redis://127.0.0.1:6379/7")


@asynccontextmanager
async def empty_pool() -> AsyncIterator[ArqRedis]:
    """A pool on the test database, emptied before and after."""
    made = await create_pool(redis_settings(REDIS_URL))
    await made.flushdb()
    try:
        yield made
    finally:
        await made.flushdb()
        await made.aclose()


async def run_queue(pool: ArqRedis, model: str, *, max_jobs: int = 10) -> list[str]:
    """The response ids an arq worker of `model` runs until its queue is empty, in the order it takes them (one at
    a time with max_jobs=1: it reads the queue as arq's poll does)."""
    ran: list[str] = []

    async def generate(ctx: dict[str, Any], payload: dict[str, Any]) -> None:
        ran.append(payload["response_id"])

    worker = Worker(
        functions=[func(generate, name=GENERATE_TASK)],
        redis_pool=pool,
        queue_name=model_queue(model),
        burst=True,
        max_jobs=max_jobs,
        poll_delay=0,
        handle_signals=False,
        keep_result=0,
    )
    await worker.main()
    return ran
