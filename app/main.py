"""create_app(): the FastAPI app; its lifespan builds the database, the models' renderers, the queue (embedded:
with the models in this process; distributed: the arq client) and the periodic work of an API node."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI

from app.api import docs
from app.api.errors import register_error_handlers
from app.api.openapi import describe_api
from app.api.request_guards import RequestGuards, UploadLimit
from app.batches import endpoints as batches
from app.batches.advance import advance_batches
from app.config import Settings
from app.console.endpoints import mount_console
from app.conversations import endpoints as conversations
from app.conversations import repository as conversation_rows
from app.db import migrations
from app.db.session import Database
from app.embeddings import endpoints as embeddings_api
from app.end_effects import register_end_effects
from app.files import endpoints as files
from app.generation.embeddings.base import Embedder
from app.generation.embeddings.models import EmbeddingModels, load_embedding_models
from app.generation.model_pool import ModelPool
from app.generation.registry import ModelRegistry
from app.generation.registry_loading import load_registry
from app.generation.renderers import RendererCache
from app.hosted_tools.calls import HostedCaller
from app.ids import new_id
from app.jobs.executor import JobExecutor
from app.jobs.recovery import Reconciler, RecoveryPolicy, release_unfinished_responses
from app.keys import endpoints as keys
from app.keys.cache import KeyCache
from app.keys.limits_cache import ProjectLimitsCache
from app.keys.project_limits import server_limits
from app.limits.headers import RateLimitHeaders
from app.limits.limiter import BucketStore, TenantRateLimits
from app.limits.memory_store import MemoryBucketStore
from app.limits.policy import FixedLimits, LimitsPolicy
from app.limits.redis_store import RedisBucketStore
from app.mcp.calls import McpCaller
from app.observability import tracing
from app.observability.metrics import limit_tenant_labels
from app.observability.requests import RequestObservation
from app.ops import endpoints as ops
from app.ops.periodic import run_periodically
from app.ops.retention import PRUNE_INTERVAL_S, apply_retention
from app.outbound.addresses import AllowedHosts
from app.quotas.stored_bytes import measure_stored_bytes
from app.read_cache.cache import ResponseJsonCache
from app.read_cache.listener import ChangeListener
from app.read_cache.sqlite_changes import hear_own_changes
from app.read_cache.vectors import StoreVectorCache
from app.responses import endpoints as responses
from app.retrieval.indexing import Indexer
from app.runtime import Runtime
from app.secrets.keys import load_sealer
from app.served_models import endpoints as served_models
from app.sessions import endpoints as sessions
from app.tenants.identity import Authenticator
from app.tenants.slots import TenantSlots
from app.transport.base import GenerationQueue
from app.usage import endpoints as usage
from app.vector_stores import endpoints as vector_stores
from app.webhooks import endpoints as webhooks
from app.webhooks.delivery import WebhookDeliverer

logger = logging.getLogger(__name__)

#: Room for an upload's multipart framing (boundaries, part headers, the `purpose` field) beyond its file's bytes.
MULTIPART_FRAMING_BYTES = 64 * 1024

GenerationFactory = Callable[
    [Settings, ModelRegistry, Database, TenantRateLimits], Awaitable[tuple[RendererCache, GenerationQueue]]
]
#: What computes embeddings for this node: None where no embedding model is declared.
EmbeddingsFactory = Callable[[Settings, EmbeddingModels], Awaitable[Embedder | None]]


async def build_embeddings(settings: Settings, models: EmbeddingModels) -> Embedder | None:
    """Embedded: the embedding models in this process, each loaded on first use. Distributed: arq jobs on each
    model's queue, run by the workers that serve it (as generation jobs are)."""
    if not len(models):
        return None
    if settings.embedded:
        from app.generation.embeddings.pool import LocalEmbeddings

        return LocalEmbeddings.from_settings(settings, models)
    from app.transport.embedding_queue import ArqEmbeddings

    return await ArqEmbeddings.connect(settings)


def build_rate_limits(settings: Settings, policy: LimitsPolicy | None = None) -> TenantRateLimits:
    """Embedded: buckets in this process. Distributed: in Redis, shared by every API node and worker (connected on
    the first bucket a limit reads: none while every tenant's limits are off). `policy`: each tenant's limits
    (default: the server's settings for all)."""
    store: BucketStore = RedisBucketStore.connect(settings.redis_url) if settings.redis_url else MemoryBucketStore()
    return TenantRateLimits(store, policy=policy or FixedLimits(server_limits(settings)))


async def build_generation(
    settings: Settings, registry: ModelRegistry, database: Database, limits: TenantRateLimits
) -> tuple[RendererCache, GenerationQueue]:
    """Embedded: the models in this process, each loaded on first use, run by this process's job executor (which
    charges each generation's output tokens to `limits`). Distributed: the arq client (the workers charge them).
    Both render prompts here, with each model's vocabulary-only tokenizer (built on first use too)."""
    from app.generation.tokenizer import ChatTokenizer

    renderers = RendererCache(ChatTokenizer.for_model)
    if not settings.embedded:
        from app.transport.redis_queue import ArqQueue

        return renderers, await ArqQueue.connect(settings)

    from app.generation.engine import concurrency
    from app.generation.job import class_weights
    from app.transport.inprocess import InProcessQueue
    from app.transport.memory_bus import MemoryBus

    pool = ModelPool.from_settings(
        settings,
        registry,
        max_models=settings.max_loaded_models,
        max_bytes=settings.max_loaded_mb * 2**20,
        renderers=renderers,  # one renderer a model: its tool rounds render with the API's
    )
    bus = MemoryBus()
    # This process's lease owner id: a lease left by an earlier run of the server is not ours.
    executor = JobExecutor(
        pool,
        database,
        bus,
        owner=new_id("node"),
        lease_s=settings.lease_s,
        charge_tokens=limits.charge_tokens,
        mcp=McpCaller.from_settings(settings, database),
        hosted=HostedCaller(database, settings),
    )
    # As many jobs of a model run as its engine has sequences; the others wait in a fair order, still queued.
    return renderers, InProcessQueue(executor, bus, places=concurrency(settings), weights=class_weights(settings))


async def release_unstored_turns(database: Database) -> int:
    """Embedded mode at start-up: the conversations that `store: false` turns of a previous run held are free at
    once (not after their claims' lease): no turn of that run runs any more. How many there were."""
    async with database.transaction() as session:
        claims = await conversation_rows.release_unstored_claims(session)
    if claims:
        logger.warning("freed %d conversations that unstored responses of a previous run held", claims)
    return claims


def changes_heard_by(read_cache: ResponseJsonCache, database: Database, settings: Settings) -> ChangeListener | None:
    """How the read cache hears every change of a response, so that it answers without a round trip
    (app/read_cache/): on SQLite this process's own connections are hooked (now: before the first query); on
    Postgres, the listener to run (returned). None where the cache trusts nothing (off, or a staleness of 0)."""
    if not (read_cache.max_bytes and read_cache.staleness_s):
        return None
    if database.engine.dialect.name == "sqlite":
        hear_own_changes(database.engine, read_cache)
        return None
    return ChangeListener(settings.database_url, read_cache)


def create_app(
    settings: Settings | None = None,
    generation: GenerationFactory | None = None,
    *,
    database_ready: bool = False,
    embeddings: EmbeddingsFactory | None = None,
) -> FastAPI:
    """`database_ready`: the caller already ran prepare_database (the CLI does, to fail before binding)."""
    settings = settings or Settings()
    build = generation or build_generation
    build_embedder = embeddings or build_embeddings
    traced = tracing.configure_tracing("llama-responses")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # An allow-list that cannot be used stops the start-up before anything runs (AllowedHostsInvalid says why).
        AllowedHosts.parse(settings.outbound_allowed_hosts)
        # Before anything that can end a response (the executor, the reconciler, a cancel).
        register_end_effects()
        if not database_ready:
            await migrations.prepare_database(settings)
        database = Database.connect(settings.database_url)
        read_cache = ResponseJsonCache(
            int(settings.read_cache_mb * 1024 * 1024), staleness_s=settings.read_cache_staleness_s
        )
        listener = changes_heard_by(read_cache, database, settings)  # before the first query: hooks connections
        limit_tenant_labels(settings.metrics_max_tenants)
        if traced:
            tracing.instrument_database(database.engine)
        registry = load_registry(settings)
        # Every limit check asks it: a project's own limits, else the server's settings.
        policy = ProjectLimitsCache(database, settings)
        limits = build_rate_limits(settings, policy)
        renderers, queue = await build(settings, registry, database, limits)
        embedding_models = load_embedding_models(settings, registry.ids)
        embedder = await build_embedder(settings, embedding_models)
        # Vector store files are indexed where the models are: here in embedded mode, on the workers otherwise.
        indexer = Indexer(database, settings, embedder) if settings.embedded else None
        sealer = await load_sealer(settings, database)
        app.state.runtime = Runtime(
            settings=settings,
            models=registry,
            database=database,
            renderers=renderers,
            queue=queue,
            sealer=sealer,
            slots=TenantSlots(settings.max_concurrent_requests_per_tenant),
            sockets=TenantSlots(settings.max_websockets_per_tenant, what="WebSocket connections open"),
            webhook_tests=TenantSlots(settings.webhook_tests_per_tenant, what="webhook endpoint tests running"),
            authenticator=Authenticator(settings, KeyCache(database, settings.key_cache_ttl_s)),
            limits=limits,
            policy=policy,
            read_cache=read_cache,
            embedding_models=embedding_models,
            embedder=embedder,
            wake_indexer=indexer.wake.set if indexer is not None else lambda: None,
            vector_cache=StoreVectorCache(int(settings.vector_cache_mb * 1024 * 1024)),
        )
        hosted = getattr(getattr(queue, "executor", None), "hosted", None)
        if isinstance(hosted, HostedCaller):
            # Built after the queue: the embedded executor's file_search embeds with it, and shares the vectors.
            hosted.embedder, hosted.vectors = embedder, app.state.runtime.vector_cache
        maintenance: list[asyncio.Task[None]] = []
        if listener is not None:
            app.state.read_cache_listener = listener
            maintenance.append(asyncio.create_task(listener.run_forever()))
        reconciler = Reconciler(database, queue, RecoveryPolicy.from_settings(settings))
        if settings.embedded:
            # NOTE: embedded mode runs one server per database, so whatever is still generating is ours and lost:
            # reconciled at once (taken over, or ended), before the first request can read it as in progress.
            orphans = await release_unfinished_responses(database)
            await release_unstored_turns(database)
            if orphans:
                logger.warning("%d responses were left generating by a previous run: reconciling them", orphans)
                await reconciler.run_round()
            # Distributed mode prunes on the workers (an arq cron job); here, this process does.
            prune = run_periodically(
                "applying retention", PRUNE_INTERVAL_S, lambda: apply_retention(database, settings)
            )
            maintenance.append(asyncio.create_task(prune))
        if indexer is not None:
            index = run_periodically("indexing vector store files", settings.vector_index_poll_s, indexer.run_forever)
            maintenance.append(asyncio.create_task(index))
        # Reconciliation wherever generation runs, and on every API node: a lost foreground job is failed (and its
        # client's stream ended) even when no worker is alive to notice.
        reconcile = run_periodically("reconciling", settings.reconcile_interval_s, reconciler.run_round)
        maintenance.append(asyncio.create_task(reconcile))
        # Webhook deliveries from every API node (and every worker): whichever process is alive sends them.
        deliverer = WebhookDeliverer(database, sealer, settings)
        interval_s = settings.webhook_delivery_interval_s
        # The first round one interval after start, not at once: the start-up (reconciliation) goes first.
        # A round starts attempts and waits for none: each holds only its tenant's and endpoint's slots.
        deliver = run_periodically("delivering webhooks", interval_s, deliverer.start_round, first_delay_s=interval_s)
        maintenance.append(asyncio.create_task(deliver))
        # Batches advance on every API node (they submit lines through this node's queue); their steps are
        # conditional UPDATEs, safe with several nodes at once.
        runtime = app.state.runtime
        advance = run_periodically("advancing batches", settings.batch_interval_s, lambda: advance_batches(runtime))
        maintenance.append(asyncio.create_task(advance))
        # Every API node measures (safe at once: see app/quotas/repository.record_measurement). The counters outlive
        # a restart, so the first round waits one interval too, as the webhooks' does.
        measure_s = settings.stored_bytes_measure_interval_s
        measure = run_periodically(
            "measuring stored bytes", measure_s, lambda: measure_stored_bytes(database), first_delay_s=measure_s
        )
        maintenance.append(asyncio.create_task(measure))
        try:
            yield
        finally:
            for task in maintenance:
                task.cancel()
            await asyncio.gather(*maintenance, return_exceptions=True)
            await deliverer.close()
            await queue.close()
            if embedder is not None:
                await embedder.close()
            await limits.close()
            await database.dispose()
            if traced:
                tracing.uninstrument_database()

    # The documentation routes are ours (app/api/docs.py): they follow the API's auth.
    app = FastAPI(title="llama-responses", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.openapi = lambda: describe_api(app, settings)  # type: ignore[method-assign]
    register_error_handlers(app)
    # An upload has its own, larger limit (its multipart framing included); every other route keeps the request's.
    uploads = [UploadLimit("POST", "/v1/files", settings.file_max_bytes + MULTIPART_FRAMING_BYTES)]
    app.add_middleware(RequestGuards, max_request_bytes=settings.max_request_bytes, upload_limits=uploads)
    # Outside the guards: their refusals carry the headers too (of the limits that are on, once a tenant is known).
    app.add_middleware(RateLimitHeaders)
    # Outermost: every request is counted and timed, a refused one included.
    app.add_middleware(RequestObservation)
    v1 = APIRouter(prefix="/v1")
    for module in (
        responses,
        sessions,
        conversations,
        served_models,
        keys,
        webhooks,
        files,
        batches,
        usage,
        vector_stores,
        embeddings_api,
    ):
        v1.include_router(module.router)
    app.include_router(v1)
    app.include_router(ops.router)
    app.include_router(docs.router)
    app.include_router(ops.metrics_router)
    if traced:
        tracing.instrument_app(app)
    mount_console(app)
    return app
