"""A worker starts a job as soon as the API announces it, not at its next poll (real Redis, no model)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

import pytest
from arq import func
from arq.connections import create_pool

from app.transport.redis_bus import JOB_READY_CHANNEL
from app.transport.redis_queue import redis_settings
from worker import main as worker_main
from worker.tasks import JobAnnouncements, listen_for_signals

pytestmark = pytest.mark.integration

REDIS_URL = os.environ.get("RESPONSES_TEST_ANNOUNCE_REDIS_URL", "redis://127.0.0.1:6379/12")
QUEUE = "llama-responses:jobs:test-announcements"


async def test_an_announced_job_starts_without_waiting_for_a_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    # Polls an hour apart: only the announcement can start the job within the test.
    monkeypatch.setattr(worker_main, "WORKER_POLL_S", 3600.0)
    started = asyncio.Event()

    async def job(ctx: dict[str, Any]) -> None:
        started.set()

    pool = await create_pool(redis_settings(REDIS_URL), default_queue_name=QUEUE)
    await pool.flushdb()
    announcements = JobAnnouncements()
    worker = worker_main.SupervisedWorker(
        announcements=announcements,
        functions=[func(job, name="job")],
        queue_name=QUEUE,
        redis_pool=pool,
        handle_signals=False,
        poll_delay=0,
    )
    listener = listen_for_signals(pool, announcements, cancel=lambda _: None)
    tasks = [asyncio.create_task(worker.main()), asyncio.create_task(listener)]
    try:
        # The worker's first poll (at start) has run and it waits now; the listener is subscribed.
        for _ in range(500):
            if QUEUE in announcements.events and await pool.pubsub_numsub(JOB_READY_CHANNEL) == [
                (JOB_READY_CHANNEL.encode(), 1)
            ]:
                break
            await asyncio.sleep(0.01)
        await pool.enqueue_job("job", _queue_name=QUEUE)
        await asyncio.sleep(0.2)
        assert not started.is_set()  # not announced: waits for the next poll
        await pool.publish(JOB_READY_CHANNEL, QUEUE)
        await asyncio.wait_for(started.wait(), 30)
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await pool.flushdb()
        await pool.aclose()
