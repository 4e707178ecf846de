"""What an API node's lifespan builds once and every request shares (app/main.py builds it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from app.config import Settings
from app.db.session import Database
from app.generation.embeddings.base import Embedder
from app.generation.embeddings.models import EmbeddingModels
from app.generation.registry import ModelRegistry
from app.generation.renderers import RendererCache
from app.limits.limiter import TenantRateLimits
from app.limits.memory_store import MemoryBucketStore
from app.limits.policy import FixedLimits, LimitsPolicy
from app.read_cache.cache import ResponseJsonCache
from app.read_cache.vectors import StoreVectorCache
from app.secrets.sealer import ContentSealer
from app.tenants.identity import Authenticator
from app.tenants.slots import TenantSlots
from app.transport.base import GenerationQueue

#: Heavy prompt renders at once: the default thread pool has CPUs + 4 threads; two leave room for the rest.
HEAVY_RENDERS = 2


@dataclass(frozen=True, slots=True)
class Runtime:
    settings: Settings
    #: The served models; requests are routed by their `model`.
    models: ModelRegistry
    database: Database
    #: Each model's prompt renderer (its own vocabulary and chat template), built on first use.
    renderers: RendererCache
    queue: GenerationQueue
    #: Seals and opens compaction items (the same key on every node).
    sealer: ContentSealer
    #: Who a request's key stands for: the bootstrap keys, and the database's through a short per-node cache.
    authenticator: Authenticator
    #: Requests each tenant has in flight here (the per-tenant concurrency limit).
    slots: TenantSlots = field(default_factory=lambda: TenantSlots(0))
    #: WebSocket connections each tenant has open here (a limit of their own: an open connection takes one of
    #: `slots` only while a response runs on it).
    sockets: TenantSlots = field(default_factory=lambda: TenantSlots(0, what="WebSocket connections open"))
    #: Webhook endpoint tests each tenant has waiting on a receiver here (each may wait the delivery timeout).
    webhook_tests: TenantSlots = field(default_factory=lambda: TenantSlots(0, what="webhook endpoint tests running"))
    #: Requests and tokens per minute of each tenant (off unless set; shared through Redis in distributed mode).
    limits: TenantRateLimits = field(default_factory=lambda: TenantRateLimits(MemoryBucketStore()))
    #: The limits of each tenant: its project's own, else the server's settings (`limits` asks the same policy).
    policy: LimitsPolicy = field(default_factory=FixedLimits)
    #: Heavy prompt renders in progress at once (a few; the rest of the thread pool stays free for light ones).
    heavy_renders: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(HEAVY_RENDERS))
    #: Finished responses' JSON as last sent, valid while the stored row's updated_at is unchanged (off: 0 bytes).
    read_cache: ResponseJsonCache = field(default_factory=lambda: ResponseJsonCache(0))
    #: The declared embedding models (/v1/embeddings, vector stores), and what runs them: this process's models
    #: (embedded mode) or their workers' (distributed); None where none is declared.
    embedding_models: EmbeddingModels = field(default_factory=EmbeddingModels)
    embedder: Embedder | None = None
    #: Starts this process's vector store indexing round at once (embedded mode; the workers poll).
    wake_indexer: Callable[[], None] = lambda: None
    #: Vector stores' embeddings kept between searches (off: 0 bytes).
    vector_cache: StoreVectorCache = field(default_factory=lambda: StoreVectorCache(0))
