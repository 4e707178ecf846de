"""What the lifespan builds once per process and every request shares."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.config import Settings
from app.generation.types import PromptRenderer
from app.queue.base import GenerationQueue
from app.services.sealing import ContentSealer


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
