"""arq WorkerSettings and the generate task; thin: generation and persistence live in app/, the worker's state in
one WorkerRuntime (runtime.py), its background tasks in tasks.py.

While Redis is gone the worker takes no jobs (arq cannot poll), and its generations go on: their state is in the
database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from signal import Signals
from typing import Any

from arq import cron, func
from arq.worker import Worker

from app.config import Settings
from app.generation.embeddings.base import EmbeddingUnavailable
from app.generation.engine import concurrency
from app.generation.job import GenerationJob
from app.observability.metrics import REDIS_ERRORS, limit_tenant_labels
from app.ops.periodic import run_periodically
from app.transport.embedding_queue import EMBED_TASK
from app.transport.redis_queue import (
    AFFINITY_TTL_S,
    GENERATE_TASK,
    affinity_owner_key,
    job_holder_key,
    model_queue,
    redis_settings,
    worker_queue,
)
from worker.drain import drain
from worker.runtime import RUNTIME_KEY, WorkerRuntime, runtime_of
from worker.tasks import (
    RESTART_BACKOFF_S,
    JobAnnouncements,
    apply_retention_exclusively,
    beat,
    listen_for_signals,
    reconcile_forever,
    supervise,
)

logger = logging.getLogger("llama_responses.worker")

#: How often a worker looks for jobs that no announcement told it of (one missed while Redis reconnected).
WORKER_POLL_S = 0.05
JOB_TIMEOUT_S = 3600


class SupervisedWorker(Worker):
    """arq's worker, except that a failed poll (Redis gone) waits and tries again instead of ending the process,
    and that it polls as soon as a job is announced on its queue (JOB_READY_CHANNEL), else every WORKER_POLL_S."""

    _backoff_s = 0.0
    _job_ready: asyncio.Event | None = None
    _draining: asyncio.Task[None] | None = None

    def __init__(self, *, announcements: JobAnnouncements, **arq_options: Any) -> None:
        super().__init__(**arq_options)
        self._announcements = announcements

    def handle_sig(self, signum: Signals) -> None:
        """The first SIGTERM or SIGINT drains the process (worker/drain.py), then stops it; a second one, or a
        signal before the start-up finished, stops it at once, as arq does."""
        runtime: WorkerRuntime | None = self.ctx.get(RUNTIME_KEY)
        if runtime is None or self._draining is not None or not self._handle_signals:
            super().handle_sig(signum)
            return
        self._draining = self.loop.create_task(self._drain_then_stop(runtime, Signals(signum)))

    async def _drain_then_stop(self, runtime: WorkerRuntime, signum: Signals) -> None:
        try:
            await drain(runtime, [self, *runtime.queue_workers])
        finally:
            super().handle_sig(signum)

    async def _poll_iteration(self) -> None:
        # arq's own pause between polls is 0 (see _job_options): the wait is here, cut short by an announcement.
        if self._job_ready is None:  # registered at the first poll: announcements wake a worker that polls
            self._job_ready = self._announcements.event(self.queue_name)
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
    runtime = runtime_of(ctx)
    job = GenerationJob.from_payload(payload)
    if job.affinity_key:
        # This worker's prefix cache is about to hold the prompt: send the next job with this key here. Set
        # before the response can complete, so a client chaining at once is already routed by it.
        with contextlib.suppress(Exception):
            await runtime.redis.set(
                affinity_owner_key(job.tenant, job.model, job.affinity_key), runtime.worker_id, ex=AFFINITY_TTL_S
            )
    # Who runs this job, for an API node relaying a `store: false` stream to notice if this worker dies.
    with contextlib.suppress(Exception):
        await runtime.redis.set(job_holder_key(job.response_id), runtime.worker_id, ex=JOB_TIMEOUT_S)
    try:
        await runtime.executor.execute(job)
    finally:
        with contextlib.suppress(Exception):
            await runtime.redis.delete(job_holder_key(job.response_id))


async def embed(ctx: dict[str, Any], payload: dict[str, Any]) -> tuple[list[list[float]], int, int]:
    """An embedding job (app/transport/embedding_queue.py): the vectors, the tokens read, the model's dimensions."""
    runtime = runtime_of(ctx)
    if runtime.embeddings is None:
        raise EmbeddingUnavailable(f"worker {runtime.worker_id} serves no embedding model")
    batch = await runtime.embeddings.embed(payload["model"], payload["inputs"])
    return batch.vectors, batch.prompt_tokens, batch.dimensions


def _job_options(max_jobs: int) -> dict[str, Any]:
    """What the shared-queue worker and a worker's own-queue worker have in common."""
    return {
        "functions": [
            func(generate, name=GENERATE_TASK, timeout=JOB_TIMEOUT_S),
            func(embed, name=EMBED_TASK, timeout=JOB_TIMEOUT_S),
        ],
        "max_jobs": max_jobs,
        "job_timeout": JOB_TIMEOUT_S,
        "keep_result": 60,
        "poll_delay": 0,  # SupervisedWorker waits in _poll_iteration instead
    }


async def _run_queue(ctx: dict[str, Any], queue_name: str) -> None:
    """Another arq worker in this process, on another queue (this worker's own, for jobs sent here by affinity,
    or another of its models'), sharing the models: jobs beyond a model's sequences wait in its engine, in order."""
    runtime = runtime_of(ctx)
    other = SupervisedWorker(
        announcements=runtime.announcements,
        queue_name=queue_name,
        redis_pool=runtime.redis,
        ctx=ctx,
        handle_signals=False,
        **_job_options(concurrency(runtime.settings)),
    )
    runtime.queue_workers.append(other)
    try:
        await other.main()
    finally:
        runtime.queue_workers.remove(other)


async def startup(
    ctx: dict[str, Any],
    *,
    settings: Settings,
    models: Sequence[str],
    announcements: JobAnnouncements,
    embedding_models: Sequence[str] = (),
) -> None:
    limit_tenant_labels(settings.metrics_max_tenants)
    runtime = ctx[RUNTIME_KEY] = await WorkerRuntime.start(
        settings, models, ctx["redis"], announcements, embedding_models
    )
    served = runtime.served
    tasks: dict[str, Callable[[], Awaitable[None]]] = {
        "signal listener": partial(
            listen_for_signals, runtime.redis, announcements, runtime.executor.cancel, runtime.executor.steer
        ),
        "heartbeat": partial(beat, runtime.redis, runtime.worker_id, served),
        "vector store indexing": runtime.indexer.run_forever,
        "reconciler": partial(reconcile_forever, runtime.reconciler, settings.reconcile_interval_s),
        "webhook delivery": partial(
            run_periodically,
            "delivering webhooks",
            settings.webhook_delivery_interval_s,
            runtime.webhooks.start_round,
            first_delay_s=settings.webhook_delivery_interval_s,
        ),
    }
    # The main arq worker takes the first model's queue; these take the others' and this worker's own.
    for queue_name in [*(model_queue(model) for model in served[1:]), worker_queue(runtime.worker_id)]:
        tasks[f"worker on {queue_name}"] = partial(_run_queue, ctx, queue_name)
    runtime.background = [asyncio.create_task(supervise(name, task)) for name, task in tasks.items()]
    # NOTE: "ready: model " is what the fault tests (and operators' log searches) look for, with one model or several.
    logger.info("worker %s ready: model %s", runtime.worker_id, ", ".join(served))


async def shutdown(ctx: dict[str, Any]) -> None:
    runtime: WorkerRuntime | None = ctx.get(RUNTIME_KEY)
    if runtime is not None:  # None: the start-up failed (a model that would not load) before building it
        await runtime.close()


async def apply_retention_task(ctx: dict[str, Any]) -> None:
    """arq cron (arq runs a tick's cron job once across workers)."""
    runtime = runtime_of(ctx)
    await apply_retention_exclusively(runtime.redis, runtime.database, runtime.settings)


def serve_metrics(host: str, port: int) -> None:
    """GET /metrics on its own port (a thread of this process): a worker serves no HTTP otherwise."""
    from prometheus_client import start_http_server

    from app.observability.metrics import exposed_registry

    start_http_server(port, addr=host, registry=exposed_registry())
    logger.info("metrics on http://%s:%d/metrics", host, port)


def worker_settings(settings: Settings, models: list[str], embedding_models: Sequence[str] = ()) -> dict[str, Any]:
    """SupervisedWorker's arguments, for a worker serving `models` and `embedding_models` (ids, one at least)."""
    assert settings.redis_url is not None and (models or embedding_models)
    announcements = JobAnnouncements()
    startup_of = partial(
        startup, settings=settings, models=models, announcements=announcements, embedding_models=embedding_models
    )
    return {
        "announcements": announcements,
        "on_startup": startup_of,
        "on_shutdown": shutdown,
        "redis_settings": redis_settings(settings.redis_url),
        "queue_name": model_queue([*models, *embedding_models][0]),
        # Every 10 minutes (arq runs each cron job once per tick across workers).
        "cron_jobs": [cron(apply_retention_task, minute=set(range(0, 60, 10)), run_at_startup=True)],
        **_job_options(concurrency(settings)),
    }
