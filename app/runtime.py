"""What the lifespan builds once per process and every request shares."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.config import Settings
from app.generation.renderers import RendererCache
from app.model_registry.spec import ModelRegistry
from app.queue.base import GenerationQueue
from app.services.sealing import ContentSealer
from app.services.tenant_slots import TenantSlots

#: Heavy prompt renders at once: the default thread pool has CPUs + 4 threads; two leave room for the rest.
HEAVY_RENDERS = 2


@dataclass(frozen=True, slots=True)
class Runtime:
    settings: Settings
    #: The served models; requests are routed by their `model`.
    models: ModelRegistry
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    #: Sessions for requests that only read: no transaction (app/db/session.py create_read_sessionmaker).
    read_sessionmaker: async_sessionmaker[AsyncSession]
    #: Each model's prompt renderer (its own vocabulary and chat template), built on first use.
    renderers: RendererCache
    queue: GenerationQueue
    #: Seals and opens compaction items (the same key on every node).
    sealer: ContentSealer
    #: Requests each tenant has in flight here (the per-tenant concurrency limit).
    slots: TenantSlots = field(default_factory=lambda: TenantSlots(0))
    #: Heavy prompt renders in progress at once (a few; the rest of the thread pool stays free for light ones).
    heavy_renders: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(HEAVY_RENDERS))
