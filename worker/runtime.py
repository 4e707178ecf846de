"""What a worker builds once at start-up and every task of it shares: one typed object under one arq ctx key."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arq.connections import ArqRedis
from arq.worker import Worker

from app.config import Settings
from app.db.session import Database
from app.end_effects import register_end_effects
from app.generation.embeddings.models import load_embedding_models
from app.generation.embeddings.pool import LocalEmbeddings
from app.generation.job import class_weights
from app.generation.model_pool import ModelPool
from app.generation.registry_loading import load_registry
from app.hosted_tools.calls import HostedCaller
from app.ids import new_id
from app.jobs.executor import JobExecutor
from app.jobs.recovery import Reconciler, RecoveryPolicy
from app.keys.limits_cache import ProjectLimitsCache
from app.limits.limiter import TenantRateLimits
from app.limits.redis_store import RedisBucketStore
from app.mcp.calls import McpCaller
from app.observability import tracing
from app.retrieval.indexing import Indexer
from app.secrets.keys import load_sealer
from app.transport.embedding_queue import ArqEmbeddings
from app.transport.redis_bus import RedisBus
from app.transport.redis_queue import ArqQueue, unregister_worker
from app.webhooks.delivery import WebhookDeliverer
from worker.tasks import JobAnnouncements

#: The arq ctx key of the WorkerRuntime (arq's own `redis` sits beside it).
RUNTIME_KEY = "llama_responses"


@dataclass(eq=False)
class WorkerRuntime:
    settings: Settings
    #: The served models' ids (at least one): the first's queue is the main arq worker's.
    models: Sequence[str]
    worker_id: str
    redis: ArqRedis
    database: Database
    pool: ModelPool
    executor: JobExecutor
    reconciler: Reconciler
    #: Sends due webhook deliveries (every worker and API node does).
    webhooks: WebhookDeliverer
    #: Jobs announced on each queue: its arq worker polls at once.
    announcements: JobAnnouncements
    #: Indexes vector store files (every worker does; embeddings through the embedding models' workers).
    indexer: Indexer
    #: The embedding models this worker serves (their queues' `embed` jobs run on them); None: it serves none.
    embeddings: LocalEmbeddings | None = None
    embedding_models: Sequence[str] = ()
    #: The supervised background tasks (signals, heartbeat, reconciler, the other queues' workers).
    background: list[asyncio.Task[None]] = field(default_factory=list)
    #: The arq workers on this process's other queues (its models' after the first, its own): a drain stops them.
    queue_workers: list[Worker] = field(default_factory=list)

    @classmethod
    async def start(
        cls,
        settings: Settings,
        models: Sequence[str],
        redis: ArqRedis,
        announcements: JobAnnouncements,
        embedding_models: Sequence[str] = (),
    ) -> WorkerRuntime:
        """Load the models (before the first heartbeat: a live worker is one that can generate), then connect."""
        register_end_effects()  # before the executor and the reconciler, which end responses
        registry = load_registry(settings)
        pool = ModelPool.from_settings(settings, registry)
        embeddings = None
        if embedding_models:
            embeddings = LocalEmbeddings.from_settings(settings, load_embedding_models(settings, registry.ids))
        try:
            for model in models:
                await pool.preload(model)
            for model in embedding_models:
                assert embeddings is not None
                await embeddings.preload(model)
        except BaseException:
            await pool.close()
            if embeddings is not None:
                await embeddings.close()
            raise
        database = Database.connect(settings.database_url)
        if tracing.configure_tracing("llama-responses-worker"):
            tracing.instrument_database(database.engine)
        worker_id = new_id("worker")
        # The output tokens of each generation are charged to its tenant's limit (its project's own, else the
        # server's) in Redis, which the API nodes share.
        limits = TenantRateLimits(RedisBucketStore(redis), policy=ProjectLimitsCache(database, settings))
        executor = JobExecutor(
            pool,
            database,
            RedisBus(redis),
            owner=worker_id,
            lease_s=settings.lease_s,
            charge_tokens=limits.charge_tokens,
            mcp=McpCaller.from_settings(settings, database),
            hosted=HostedCaller(database, settings, ArqEmbeddings(redis, settings.embedding_timeout_s)),
        )
        queue = ArqQueue(redis, class_weights(settings))
        reconciler = Reconciler(database, queue, RecoveryPolicy.from_settings(settings))
        webhooks = WebhookDeliverer(database, await load_sealer(settings, database), settings)
        indexer = Indexer(database, settings, ArqEmbeddings(redis, settings.embedding_timeout_s))
        return cls(
            settings,
            models,
            worker_id,
            redis,
            database,
            pool,
            executor,
            reconciler,
            webhooks,
            announcements,
            indexer,
            embeddings,
            embedding_models,
        )

    @property
    def served(self) -> list[str]:
        """Every model this worker takes jobs for: its generation models', then its embedding models'."""
        return [*self.models, *self.embedding_models]

    async def close(self) -> None:
        for task in self.background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.webhooks.close()
        with contextlib.suppress(Exception):
            await unregister_worker(self.redis, self.worker_id, self.served)
        await self.pool.close()
        if self.embeddings is not None:
            await self.embeddings.close()
        await self.database.dispose()


def runtime_of(ctx: dict[str, Any]) -> WorkerRuntime:
    runtime: WorkerRuntime = ctx[RUNTIME_KEY]
    return runtime
