"""Distributed mode's embeddings: a request is an arq job on its model's queue (the one its workers take from, as
a generation's is), and its vectors come back as the job's result. Clients' /v1/embeddings and the vector stores'
indexing and search share it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from arq import create_pool
from arq.connections import ArqRedis
from arq.jobs import Job

from app.config import Settings
from app.generation.embeddings.base import EmbeddingBatch, EmbeddingInput, EmbeddingUnavailable
from app.transport.redis_bus import JOB_READY_CHANNEL
from app.transport.redis_queue import QUEUE_NAME, model_queue, model_workers_key, redis_settings

EMBED_TASK = "embed"
#: How often a caller looks for its result in Redis: an embedding takes milliseconds to a second.
RESULT_POLL_S = 0.01


def embedding_payload(model: str, inputs: Sequence[EmbeddingInput]) -> dict[str, Any]:
    return {"model": model, "inputs": [item if isinstance(item, str) else list(item) for item in inputs]}


class ArqEmbeddings:
    """An Embedder whose work runs on the workers that serve each embedding model."""

    def __init__(self, pool: ArqRedis, timeout_s: float, *, owned: bool = False) -> None:
        self.pool = pool
        self.timeout_s = timeout_s
        self._owned = owned

    @classmethod
    async def connect(cls, settings: Settings) -> ArqEmbeddings:
        assert settings.redis_url is not None
        pool = await create_pool(redis_settings(settings.redis_url), default_queue_name=QUEUE_NAME)
        return cls(pool, settings.embedding_timeout_s, owned=True)

    async def live_workers(self, model: str) -> int:
        return int(await self.pool.zcount(model_workers_key(model), time.time(), "+inf"))

    async def embed(self, model: str, inputs: Sequence[EmbeddingInput]) -> EmbeddingBatch:
        if not await self.live_workers(model):
            raise EmbeddingUnavailable(f"no worker serves the embedding model '{model}' now")
        queue = model_queue(model)
        job: Job | None = await self.pool.enqueue_job(EMBED_TASK, embedding_payload(model, inputs), _queue_name=queue)
        assert job is not None  # a fresh random job id is never already queued
        await self.pool.publish(JOB_READY_CHANNEL, queue)
        try:
            result = await job.result(timeout=self.timeout_s, poll_delay=RESULT_POLL_S)
        except TimeoutError:
            # Not taken yet: taken off the queue (one already running ends, and its result expires unread).
            await self.pool.zrem(queue, job.job_id)
            raise EmbeddingUnavailable(
                f"the embedding model '{model}' did not answer within {self.timeout_s:g} s"
            ) from None
        except asyncio.CancelledError:
            await asyncio.shield(self.pool.zrem(queue, job.job_id))
            raise
        vectors, tokens, dimensions = result
        return EmbeddingBatch(vectors, tokens, dimensions)

    async def close(self) -> None:
        if self._owned:
            await self.pool.aclose()
