"""Distributed mode's queue: generation jobs on arq/Redis (job id = response id), cancel signals by pub/sub."""

from __future__ import annotations

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from app.config import Settings
from app.queue.base import GenerationJob
from app.queue.redis_bus import CANCEL_CHANNEL, KEY_PREFIX, RedisBus

QUEUE_NAME = f"{KEY_PREFIX}:jobs"
WORKER_KEY_PATTERN = f"{KEY_PREFIX}:worker:*"
GENERATE_TASK = "generate"
#: Fail fast when Redis is down: a create is a 503 in about this long, not a hang.
REDIS_CONNECT_TIMEOUT_S = 2


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
        await self.pool.enqueue_job(GENERATE_TASK, job.to_payload(), _job_id=job.response_id, _queue_name=QUEUE_NAME)

    async def cancel(self, response_id: str) -> None:
        await self.pool.publish(CANCEL_CHANNEL, response_id)

    async def workers_alive(self) -> bool:
        async for _ in self.pool.scan_iter(match=WORKER_KEY_PATTERN, count=100):
            return True
        return False

    async def close(self) -> None:
        await self.pool.aclose()
