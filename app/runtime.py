"""What the lifespan builds once per process and every request shares."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.config import Settings
from app.generation.types import PromptRenderer
from app.queue.base import GenerationQueue
from app.services.sealing import ContentSealer
from app.services.tenant_slots import TenantSlots


@dataclass(frozen=True, slots=True)
class Runtime:
    settings: Settings
    model_id: str
    model_created: int
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    tokenizer: PromptRenderer
    queue: GenerationQueue
    #: Seals and opens compaction items (the same key on every node).
    sealer: ContentSealer
    #: Requests each tenant has in flight here (the per-tenant concurrency limit).
    slots: TenantSlots = field(default_factory=lambda: TenantSlots(0))
