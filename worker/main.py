"""arq WorkerSettings and the generate task; thin: generation and persistence live in app/."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import Any

from arq import func
from arq.constants import job_key_prefix
from arq.jobs import Job, JobStatus
from arq.worker import Worker

from app.config import Settings
from app.db.base import utc_now
from app.db.repositories import responses as repository
from app.db.session import create_engine, create_sessionmaker
from app.generation.engine import LlamaEngine, concurrency
from app.ids import new_id
from app.queue.arq_backend import (
    AFFINITY_TTL_S,
    GENERATE_TASK,
    QUEUE_NAME,
    WORKER_KEY_PATTERN,
    ArqQueue,
    affinity_owner_key,
    redis_settings,
    worker_key,
    worker_queue,
)
from app.queue.base import GenerationJob
from app.queue.local_runner import LocalRunner
from app.queue.redis_bus import CANCEL_CHANNEL, RedisBus, subscribe_confirmed
from app.services.execution import execute_job
from app.services.recovery import LOST_GENERATION_ERROR

logger = logging.getLogger("llama_responses.worker")

WORKER_HEARTBEAT_S = 5
WORKER_KEY_TTL_S = 15
RECONCILE_INTERVAL_S = 5.0
#: An in-progress response whose heartbeat is older than this lost its worker.
STALE_HEARTBEAT_S = 20
#: A queued response older than this whose job Redis no longer has is enqueued again.
LOST_JOB_AGE_S = 10
JOB_TIMEOUT_S = 3600


async def generate(ctx: dict[str, Any], payload: dict[str, Any]) -> None:
    job = GenerationJob.from_payload(payload)
    if job.affinity_key:
        # This worker's prefix cache is about to hold the prompt: send the next job with this key here. Set
        # before the response can complete, so a client chaining at once is already routed by it.
        owner_key = affinity_owner_key(job.tenant, job.affinity_key)
        await ctx["redis"].set(owner_key, ctx["worker_id"], ex=AFFINITY_TTL_S)
    await execute_job(job, ctx["runner"], ctx["sessionmaker"], ctx["bus"])


def _job_options(max_jobs: int) -> dict[str, Any]:
    """What the shared-queue worker and a worker's own-queue worker have in common."""
    return {
        "functions": [func(generate, name=GENERATE_TASK, timeout=JOB_TIMEOUT_S)],
        "max_jobs": max_jobs,
        "job_timeout": JOB_TIMEOUT_S,
        "keep_result": 60,
        "poll_delay": 0.05,
    }


async def _listen_for_cancels(ctx: dict[str, Any]) -> None:
    pubsub = ctx["redis"].pubsub()
    await subscribe_confirmed(pubsub, CANCEL_CHANNEL)
    try:
        async for message in pubsub.listen():
            if message["type"] == "message":
                ctx["runner"].cancel(message["data"].decode())
    finally:
        await pubsub.aclose()


async def _beat(ctx: dict[str, Any]) -> None:
    key = worker_key(ctx["worker_id"])
    while True:
        await ctx["redis"].set(key, "1", ex=WORKER_KEY_TTL_S)
        await asyncio.sleep(WORKER_HEARTBEAT_S)


async def reconcile(ctx: dict[str, Any]) -> None:
    """Fail responses whose worker died; enqueue again jobs that Redis lost (Postgres is the source of truth)."""
    now = utc_now()
    async with ctx["sessionmaker"]() as session, session.begin():
        failed = await repository.fail_stale(
            session, heartbeat_before=now - timedelta(seconds=STALE_HEARTBEAT_S), error=LOST_GENERATION_ERROR
        )
        queued = await repository.queued_jobs(session, created_before=now - timedelta(seconds=LOST_JOB_AGE_S))
    if failed:
        logger.warning("failed %d responses whose worker stopped", failed)
    for payload in queued:
        if not await _job_is_waiting(ctx, payload["response_id"]):
            logger.warning("re-enqueueing %s, which Redis lost (or a dead worker held)", payload["response_id"])
            # Drop arq's record of the lost job, or the new enqueue would be a no-op.
            await ctx["redis"].delete(job_key_prefix + payload["response_id"])
            await ctx["queue"].enqueue(GenerationJob.from_payload(payload))


async def _job_is_waiting(ctx: dict[str, Any], job_id: str) -> bool:
    """Queued in the shared queue or in a live worker's own, or running."""
    if await Job(job_id, ctx["redis"], _queue_name=QUEUE_NAME).status() != JobStatus.not_found:
        return True
    async for key in ctx["redis"].scan_iter(match=WORKER_KEY_PATTERN, count=100):
        worker_id = key.decode().rsplit(":", 1)[-1]
        if await ctx["redis"].zscore(worker_queue(worker_id), job_id) is not None:
            return True
    return False


async def _reconcile_forever(ctx: dict[str, Any]) -> None:
    while True:
        try:
            await reconcile(ctx)
        except Exception:
            logger.exception("reconcile failed; trying again")
        await asyncio.sleep(RECONCILE_INTERVAL_S)


async def _run_own_queue(ctx: dict[str, Any]) -> None:
    """A second arq worker in this process, on this worker's own queue (jobs sent here by affinity), sharing
    the model: jobs beyond its sequences wait in the engine, in order."""
    own = Worker(
        queue_name=worker_queue(ctx["worker_id"]),
        redis_pool=ctx["redis"],
        ctx=ctx,
        handle_signals=False,
        **_job_options(ctx["runner"].engine.slots),
    )
    await own.main()


async def startup(ctx: dict[str, Any]) -> None:
    settings = Settings()
    ctx["settings"] = settings
    ctx["runner"] = LocalRunner(await asyncio.to_thread(LlamaEngine.from_settings, settings))
    ctx["engine"] = create_engine(settings.database_url)
    ctx["sessionmaker"] = create_sessionmaker(ctx["engine"])
    ctx["bus"] = RedisBus(ctx["redis"])
    ctx["queue"] = ArqQueue(ctx["redis"])
    ctx["worker_id"] = new_id("worker")
    ctx["background"] = [
        asyncio.create_task(coroutine(ctx))
        for coroutine in (_listen_for_cancels, _beat, _reconcile_forever, _run_own_queue)
    ]
    logger.info("worker %s ready: model %s", ctx["worker_id"], settings.resolved_model_path.name)


async def shutdown(ctx: dict[str, Any]) -> None:
    for task in ctx.get("background", []):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if "worker_id" in ctx:
        await ctx["redis"].delete(worker_key(ctx["worker_id"]))
    if "runner" in ctx:
        await ctx["runner"].close()
    if "engine" in ctx:
        await ctx["engine"].dispose()


def worker_settings(settings: Settings) -> dict[str, Any]:
    """arq's WorkerSettings, as keyword arguments for arq.worker.run_worker."""
    assert settings.redis_url is not None
    return {
        "on_startup": startup,
        "on_shutdown": shutdown,
        "redis_settings": redis_settings(settings.redis_url),
        "queue_name": QUEUE_NAME,
        **_job_options(concurrency(settings)),
    }
