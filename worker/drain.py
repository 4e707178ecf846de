"""A worker told to stop (SIGTERM or SIGINT: a deploy, a scale-down) drains before it exits, so that a rolling
restart fails no response: it takes no new job and says so (affinity sends it none, jobs waiting in its own queue
go back to their models' queues), hands its background jobs over at once (arq puts each back in its queue, and
another worker claims it from the progress stored), and lets its foreground ones, which no other worker can take
over, finish within `worker_drain_s` before it cuts what is left."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from arq.worker import Worker

from app.transport.redis_queue import mark_draining
from worker.runtime import WorkerRuntime

logger = logging.getLogger("llama_responses.worker")

#: How long the worker stays marked draining in Redis after its drain should have ended (it unregisters on exit).
DRAINING_MARGIN_S = 60.0


@dataclass(frozen=True, slots=True)
class DrainReport:
    handed_over: int
    finished: int
    cut: int
    seconds: float


def _running(workers: Sequence[Worker]) -> dict[str, asyncio.Task[Any]]:
    """The jobs the process runs now (arq's tasks of each of its queue workers), by job id = response id."""
    return {job_id: task for worker in workers for job_id, task in worker.tasks.items() if not task.done()}


async def drain(runtime: WorkerRuntime, workers: Sequence[Worker]) -> DrainReport:
    """Run the drain; returns once nothing runs, or at the deadline with what is left running (the caller cuts
    it). Redis being away makes no step of it fail the others."""
    started = time.monotonic()
    for worker in workers:
        worker.allow_pick_jobs = False
    queue = runtime.reconciler.queue  # the worker's own ArqQueue: no second one for the drain
    with contextlib.suppress(Exception):
        await mark_draining(runtime.redis, runtime.worker_id, runtime.settings.worker_drain_s + DRAINING_MARGIN_S)
    with contextlib.suppress(Exception):
        await queue.release_stranded()
    at_start = _running(workers)
    background = runtime.executor.handed_over_when_stopped()
    for response_id, task in at_start.items():
        if response_id in background:
            task.cancel()  # the run stores its progress and gives its lease up; arq enqueues the job again
    remaining = set(_running(workers).values())
    if remaining:  # no new job starts meanwhile: none is picked any more
        await asyncio.wait(remaining, timeout=max(started + runtime.settings.worker_drain_s - time.monotonic(), 0))
    # A job handed over from this worker's own queue went back there: move it to where a worker takes it.
    with contextlib.suppress(Exception):
        await queue.release_stranded()
    cut = len(_running(workers))
    handed_over = len(background & at_start.keys())
    report = DrainReport(handed_over, len(at_start) - handed_over - cut, cut, time.monotonic() - started)
    logger.info(
        "drained in %.1f s: %d handed over, %d finished, %d cut",
        report.seconds,
        report.handed_over,
        report.finished,
        report.cut,
    )
    return report
