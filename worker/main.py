"""arq WorkerSettings and the generate task; thin: generation and persistence live in app/.

Every background task of a worker is supervised: it restarts with backoff when it fails (a Redis restart, a
database blip), so a worker outlives the outages of what it depends on. While Redis is gone the worker takes
no jobs (arq cannot poll), and its generations go on: their state is in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from arq import cron, func
from arq.worker import Worker

from app.config import Settings
from app.db.session import create_engine, create_sessionmaker
from app.generation.engine import concurrency
from app.ids import new_id
from app.model_registry.loading import load_registry
from app.observability import tracing
from app.observability.metrics import REDIS_ERRORS, WORKER_HEARTBEATS
from app.queue.arq_backend import (
    AFFINITY_TTL_S,
    GENERATE_TASK,
    ArqQueue,
    affinity_owner_key,
    exclusive,
    job_holder_key,
    model_queue,
    redis_settings,
    register_worker,
    unregister_worker,
    worker_queue,
)
from app.queue.base import GenerationJob
from app.queue.model_pool import ModelPool
from app.queue.redis_bus import CANCEL_CHANNEL, JOB_READY_CHANNEL, RedisBus, subscribe_confirmed
from app.services.execution import execute_job
from app.services.recovery import Reconciler, RecoveryPolicy
from app.services.retention import apply_retention

logger = logging.getLogger("llama_responses.worker")

WORKER_HEARTBEAT_S = 5
#: How often a worker looks for jobs that no announcement told it of (one missed while Redis reconnected).
WORKER_POLL_S = 0.05
#: A worker whose registration is older than this is not counted alive (three missed heartbeats).
WORKER_TTL_S = 15
JOB_TIMEOUT_S = 3600
#: The retention lock outlives any purge (batches of short transactions); a worker that dies holding it delays
#: the next purge by this much at most.
RETENTION_LOCK_TTL_S = 1800
#: Backoff of a failed background task (and of arq's polling while Redis is away): doubles up to the cap.
RESTART_BACKOFF_S = (0.5, 30.0)


class SupervisedWorker(Worker):
    """arq's worker, except that a failed poll (Redis gone) waits and tries again instead of ending the process,
    and that it polls as soon as a job is announced on its queue (JOB_READY_CHANNEL), else every WORKER_POLL_S."""

    _backoff_s = 0.0
    _job_ready: asyncio.Event | None = None

    async def _poll_iteration(self) -> None:
        # arq's own pause between polls is 0 (see _job_options): the wait is here, cut short by an announcement.
        if self._job_ready is None:
            self._job_ready = self.ctx.setdefault("job_ready", {}).setdefault(self.queue_name, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WORKER_POLL_S):
                await self._job_ready.wait()
        self._job_ready.clear()
        # NOTE: arq's own loop lets a Redis error end `main` and the process with it, and the generations it runs.
        try:
            await super()._poll_iteration()
        except Exception as error:
            REDIS_ERRORS.inc()
            self._backoff_s = min(max(self._backoff_s * 2, RESTART_BACKOFF_S[0]), RESTART_BACKOFF_S[1])
            logger.warning("cannot poll for jobs (%s); trying again in %.1f s", error, self._backoff_s)
            await asyncio.sleep(self._backoff_s)
        else:
            self._backoff_s = 0.0


async def generate(ctx: dict[str, Any], payload: dict[str, Any]) -> None:
    job = GenerationJob.from_payload(payload)
    if job.affinity_key:
        # This worker's prefix cache is about to hold the prompt: send the next job with this key here. Set
        # before the response can complete, so a client chaining at once is already routed by it.
        with contextlib.suppress(Exception):
            await ctx["redis"].set(
                affinity_owner_key(job.tenant, job.model, job.affinity_key), ctx["worker_id"], ex=AFFINITY_TTL_S
            )
    # Who runs this job, for an API node relaying a `store: false` stream to notice if this worker dies.
    with contextlib.suppress(Exception):
        await ctx["redis"].set(job_holder_key(job.response_id), ctx["worker_id"], ex=JOB_TIMEOUT_S)
    settings: Settings = ctx["settings"]
    try:
        await execute_job(
            job, ctx["runner"], ctx["sessionmaker"], ctx["bus"], owner=ctx["worker_id"], lease_s=settings.lease_s
        )
    finally:
        with contextlib.suppress(Exception):
            await ctx["redis"].delete(job_holder_key(job.response_id))


def _job_options(max_jobs: int) -> dict[str, Any]:
    """What the shared-queue worker and a worker's own-queue worker have in common."""
    return {
        "functions": [func(generate, name=GENERATE_TASK, timeout=JOB_TIMEOUT_S)],
        "max_jobs": max_jobs,
        "job_timeout": JOB_TIMEOUT_S,
        "keep_result": 60,
        "poll_delay": 0,  # SupervisedWorker waits in _poll_iteration instead
    }


async def _listen_for_signals(ctx: dict[str, Any]) -> None:
    """Cancel signals, for a stop within a token, and job announcements, for a start without waiting for the next
    poll. A signal missed while this reconnects is not lost: the cancel is stored, and each generation's heartbeat
    reads it; the job is found by the next poll."""
    pubsub = ctx["redis"].pubsub()
    try:
        await subscribe_confirmed(pubsub, CANCEL_CHANNEL)
        await subscribe_confirmed(pubsub, JOB_READY_CHANNEL)
        async for message in pubsub.listen():
            if message["type"] != "message":
                continue
            if message["channel"].decode() == JOB_READY_CHANNEL:
                ready = ctx.get("job_ready", {}).get(message["data"].decode())
                if ready is not None:
                    ready.set()
            else:
                ctx["runner"].cancel(message["data"].decode())
    finally:
        with contextlib.suppress(Exception):
            await pubsub.aclose()
    raise ConnectionError("the cancel subscription ended")


async def _beat(ctx: dict[str, Any]) -> None:
    while True:
        await register_worker(ctx["redis"], ctx["worker_id"], ctx["models"], WORKER_TTL_S)
        WORKER_HEARTBEATS.inc()
        await asyncio.sleep(WORKER_HEARTBEAT_S)


async def _reconcile_forever(ctx: dict[str, Any]) -> None:
    settings: Settings = ctx["settings"]
    while True:
        await ctx["reconciler"].run_round()
        await asyncio.sleep(settings.reconcile_interval_s)


async def _run_queue(ctx: dict[str, Any], queue_name: str) -> None:
    """Another arq worker in this process, on another queue (this worker's own, for jobs sent here by affinity,
    or another of its models'), sharing the models: jobs beyond a model's sequences wait in its engine, in order."""
    other = SupervisedWorker(
        queue_name=queue_name,
        redis_pool=ctx["redis"],
        ctx=ctx,
        handle_signals=False,
        **_job_options(concurrency(ctx["settings"])),
    )
    await other.main()


async def supervise(name: str, task: Callable[[], Awaitable[None]]) -> None:
    """Run `task` for ever: when it fails (or ends), log it and start it again after a pause that grows while
    it keeps failing and starts small again once it has run a while."""
    backoff_s = RESTART_BACKOFF_S[0]
    while True:
        started = time.monotonic()
        try:
            await task()
            logger.warning("%s ended; starting it again in %.1f s", name, backoff_s)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            logger.warning("%s failed (%r); starting it again in %.1f s", name, error, backoff_s)
        if time.monotonic() - started > RESTART_BACKOFF_S[1]:
            backoff_s = RESTART_BACKOFF_S[0]
        await asyncio.sleep(backoff_s)
        backoff_s = min(backoff_s * 2, RESTART_BACKOFF_S[1])


async def startup(ctx: dict[str, Any]) -> None:
    settings = Settings()
    ctx["settings"] = settings
    models: list[str] = ctx["models"]
    pool = ModelPool.from_settings(settings, load_registry(settings))
    ctx["runner"] = pool
    for model in models:  # loaded before the first heartbeat: a live worker is one that can generate
        await pool.preload(model)
    ctx["engine"] = create_engine(settings.database_url)
    if tracing.configure_tracing("llama-responses-worker"):
        tracing.instrument_database(ctx["engine"])
    ctx["sessionmaker"] = create_sessionmaker(ctx["engine"])
    ctx["bus"] = RedisBus(ctx["redis"])
    ctx["queue"] = ArqQueue(ctx["redis"])
    ctx["reconciler"] = Reconciler(ctx["sessionmaker"], ctx["queue"], RecoveryPolicy.from_settings(settings))
    ctx["worker_id"] = new_id("worker")
    tasks: dict[str, Callable[[], Awaitable[None]]] = {
        name: partial(task, ctx)
        for name, task in (
            ("signal listener", _listen_for_signals),
            ("heartbeat", _beat),
            ("reconciler", _reconcile_forever),
        )
    }
    # The main arq worker takes the first model's queue; these take the others' and this worker's own.
    for queue_name in [*(model_queue(model) for model in models[1:]), worker_queue(ctx["worker_id"])]:
        tasks[f"worker on {queue_name}"] = partial(_run_queue, ctx, queue_name)
    ctx["background"] = [asyncio.create_task(supervise(name, task)) for name, task in tasks.items()]
    # NOTE: "ready: model " is what the fault tests (and operators' log searches) look for, with one model or several.
    logger.info("worker %s ready: model %s", ctx["worker_id"], ", ".join(models))


async def shutdown(ctx: dict[str, Any]) -> None:
    for task in ctx.get("background", []):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if "worker_id" in ctx:
        with contextlib.suppress(Exception):
            await unregister_worker(ctx["redis"], ctx["worker_id"], ctx["models"])
    if "runner" in ctx:
        await ctx["runner"].close()
    if "engine" in ctx:
        await ctx["engine"].dispose()


async def apply_retention_task(ctx: dict[str, Any]) -> None:
    """arq cron: purge expired responses and prune finished streams' events. arq runs a tick's cron job once
    across workers; the lock keeps a purge that outlasts its tick from overlapping the next one."""
    async with exclusive(ctx["redis"], "retention", RETENTION_LOCK_TTL_S) as held:
        if held:
            await apply_retention(ctx["sessionmaker"], ctx["settings"])


def serve_metrics(host: str, port: int) -> None:
    """GET /metrics on its own port (a thread of this process): a worker serves no HTTP otherwise."""
    from prometheus_client import start_http_server

    from app.observability.metrics import exposed_registry

    start_http_server(port, addr=host, registry=exposed_registry())
    logger.info("metrics on http://%s:%d/metrics", host, port)


def worker_settings(settings: Settings, models: list[str]) -> dict[str, Any]:
    """arq's Worker arguments, for a worker serving `models` (ids, at least one)."""
    assert settings.redis_url is not None and models
    return {
        "on_startup": startup,
        "on_shutdown": shutdown,
        "ctx": {"models": models},
        "redis_settings": redis_settings(settings.redis_url),
        "queue_name": model_queue(models[0]),
        # Every 10 minutes (arq runs each cron job once per tick across workers).
        "cron_jobs": [cron(apply_retention_task, minute=set(range(0, 60, 10)), run_at_startup=True)],
        **_job_options(concurrency(settings)),
    }
