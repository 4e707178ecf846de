"""Distributed mode's queue: generation jobs on arq/Redis (job id = response id), cancel signals by pub/sub."""

from __future__ import annotations

import hashlib

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from app.config import Settings
from app.queue.base import GenerationJob
from app.queue.redis_bus import CANCEL_CHANNEL, KEY_PREFIX, RedisBus

QUEUE_NAME = f"{KEY_PREFIX}:jobs"
WORKER_KEY_PATTERN = f"{KEY_PREFIX}:worker:*"
#: How long a worker stays the preferred home of an affinity key after its last job with that key.
AFFINITY_TTL_S = 600
GENERATE_TASK = "generate"
#: Fail fast when Redis is down: a create is a 503 in about this long, not a hang.
REDIS_CONNECT_TIMEOUT_S = 2


def worker_key(worker_id: str) -> str:
    """Exists while the worker is alive (it refreshes the key's expiry)."""
    return f"{KEY_PREFIX}:worker:{worker_id}"


def worker_queue(worker_id: str) -> str:
    """A worker's own queue, for jobs sent to it by affinity; it takes from the shared queue too."""
    return f"{QUEUE_NAME}:{worker_id}"


def affinity_owner_key(tenant: str, affinity_key: str) -> str:
    """Where the worker that last ran `tenant`'s jobs with this key is named. Scoped by tenant, so that one
    tenant's prompt_cache_key never routes to (or reveals) another's; hashed, so a key's size is bounded."""
    digest = hashlib.sha256(f"{len(tenant)}:{tenant}:{affinity_key}".encode()).hexdigest()
    return f"{KEY_PREFIX}:affinity:{digest}"


def redis_settings(redis_url: str) -> RedisSettings:
    settings = RedisSettings.from_dsn(redis_url)
    settings.conn_timeout = REDIS_CONNECT_TIMEOUT_S
    settings.conn_retries = 1
    return settings


class ArqQueue:
    def __init__(self, pool: ArqRedis) -> None:
        self.pool = pool
        self.bus = RedisBus(pool)

    @classmethod
    async def connect(cls, settings: Settings) -> ArqQueue:
        assert settings.redis_url is not None
        return cls(await create_pool(redis_settings(settings.redis_url), default_queue_name=QUEUE_NAME))

    async def enqueue(self, job: GenerationJob) -> None:
        # A job id that is already queued makes this a no-op: one response is generated once.
        queue = await self._queue_for(job)
        await self.pool.enqueue_job(GENERATE_TASK, job.to_payload(), _job_id=job.response_id, _queue_name=queue)

    async def _queue_for(self, job: GenerationJob) -> str:
        """The queue of the live worker that last ran a job with this one's affinity key (its prefix cache
        likely holds this prompt's start); else the shared queue, which every worker takes from."""
        if job.affinity_key:
            owner = await self.pool.get(affinity_owner_key(job.tenant, job.affinity_key))
            if owner is not None and await self.pool.exists(worker_key(owner.decode())):
                return worker_queue(owner.decode())
        return QUEUE_NAME

    async def cancel(self, response_id: str) -> None:
        await self.pool.publish(CANCEL_CHANNEL, response_id)

    async def workers_alive(self) -> bool:
        async for _ in self.pool.scan_iter(match=WORKER_KEY_PATTERN, count=100):
            return True
        return False

    async def close(self) -> None:
        await self.pool.aclose()
