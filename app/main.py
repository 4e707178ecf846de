"""create_app(): the FastAPI app; its lifespan builds the database engine, the model or the queue client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.api.openapi import describe_api
from app.api.request_guards import RequestGuards
from app.api.routes import (
    compaction,
    console,
    conversations,
    docs,
    health,
    input_items,
    input_tokens,
    metrics,
    models,
    response_list,
    responses,
    websocket,
)
from app.config import Settings
from app.db import migrations
from app.db.session import create_engine, create_read_sessionmaker, create_sessionmaker
from app.errors import register_error_handlers
from app.generation.renderers import RendererCache
from app.model_registry.loading import load_registry
from app.model_registry.spec import ModelRegistry
from app.observability import tracing
from app.observability.requests import RequestObservation
from app.queue.base import GenerationQueue
from app.queue.model_pool import ModelPool
from app.runtime import Runtime
from app.services.periodic import run_periodically
from app.services.recovery import Reconciler, RecoveryPolicy, release_unfinished_responses
from app.services.retention import PRUNE_INTERVAL_S, apply_retention
from app.services.sealing import load_sealer
from app.services.tenant_slots import TenantSlots

logger = logging.getLogger(__name__)

GenerationFactory = Callable[
    [Settings, ModelRegistry, async_sessionmaker[AsyncSession]], Awaitable[tuple[RendererCache, GenerationQueue]]
]


async def build_generation(
    settings: Settings, registry: ModelRegistry, sessionmaker: async_sessionmaker[AsyncSession]
) -> tuple[RendererCache, GenerationQueue]:
    """Embedded: the models in this process, each loaded on first use. Distributed: the arq client. Both
    render prompts here, with each model's vocabulary-only tokenizer (built on first use too)."""
    from app.generation.tokenizer import ChatTokenizer

    renderers = RendererCache(ChatTokenizer.for_model)
    if not settings.embedded:
        from app.queue.arq_backend import ArqQueue

        return renderers, await ArqQueue.connect(settings)

    from app.queue.inprocess import InProcessQueue

    pool = ModelPool.from_settings(
        settings, registry, max_models=settings.max_loaded_models, max_bytes=settings.max_loaded_mb * 2**20
    )
    return renderers, InProcessQueue(pool, sessionmaker, settings.lease_s)


def create_app(
    settings: Settings | None = None,
    generation: GenerationFactory | None = None,
    *,
    database_ready: bool = False,
) -> FastAPI:
    """`database_ready`: the caller already ran prepare_database (the CLI does, to fail before binding)."""
    settings = settings or Settings()
    build = generation or build_generation
    traced = tracing.configure_tracing("llama-responses")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not database_ready:
            await migrations.prepare_database(settings)
        engine = create_engine(settings.database_url)
        if traced:
            tracing.instrument_database(engine)
        sessionmaker = create_sessionmaker(engine)
        registry = load_registry(settings)
        renderers, queue = await build(settings, registry, sessionmaker)
        app.state.runtime = Runtime(
            settings=settings,
            models=registry,
            engine=engine,
            sessionmaker=sessionmaker,
            read_sessionmaker=create_read_sessionmaker(engine),
            renderers=renderers,
            queue=queue,
            sealer=await load_sealer(settings, sessionmaker),
            slots=TenantSlots(settings.max_concurrent_requests_per_tenant),
        )
        maintenance: list[asyncio.Task[None]] = []
        reconciler = Reconciler(sessionmaker, queue, RecoveryPolicy.from_settings(settings))
        if settings.embedded:
            # NOTE: embedded mode runs one server per database, so whatever is still generating is ours and lost:
            # reconciled at once (taken over, or ended), before the first request can read it as in progress.
            orphans = await release_unfinished_responses(app.state.runtime)
            if orphans:
                logger.warning("%d responses were left generating by a previous run: reconciling them", orphans)
                await reconciler.run_round()
            # Distributed mode prunes on the workers (an arq cron job); here, this process does.
            prune = run_periodically(
                "applying retention", PRUNE_INTERVAL_S, lambda: apply_retention(sessionmaker, settings)
            )
            maintenance.append(asyncio.create_task(prune))
        # Reconciliation wherever generation runs, and on every API node: a lost foreground job is failed (and its
        # client's stream ended) even when no worker is alive to notice.
        reconcile = run_periodically("reconciling", settings.reconcile_interval_s, reconciler.run_round)
        maintenance.append(asyncio.create_task(reconcile))
        try:
            yield
        finally:
            for task in maintenance:
                task.cancel()
            await asyncio.gather(*maintenance, return_exceptions=True)
            await queue.close()
            await engine.dispose()
            if traced:
                tracing.uninstrument_database()

    # The documentation routes are ours (app/api/routes/docs.py): they follow the API's auth.
    app = FastAPI(title="llama-responses", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.openapi = lambda: describe_api(app, settings)  # type: ignore[method-assign]
    register_error_handlers(app)
    app.add_middleware(RequestGuards, max_request_bytes=settings.max_request_bytes)
    # Outermost: every request is counted and timed, a refused one included.
    app.add_middleware(RequestObservation)
    v1 = APIRouter(prefix="/v1")
    for module in (compaction, input_tokens, response_list, responses, input_items, conversations, models, websocket):
        v1.include_router(module.router)
    app.include_router(v1)
    app.include_router(health.router)
    app.include_router(docs.router)
    app.include_router(metrics.router)
    if traced:
        tracing.instrument_app(app)
    console.mount_console(app)
    return app
