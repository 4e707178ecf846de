"""Distributed mode's queue: generation jobs on arq/Redis (job id = response id), one queue per model (so a worker
takes only jobs it can run) scored in the fair order (fair_scores.py), cancel signals by pub/sub, and the registry
of live workers (sorted sets, one for every worker and one per model: worker id -> when its heartbeat expires)."""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix, retry_key_prefix
from arq.jobs import Job

from app.config import Settings
from app.generation.job import ClassWeights, GenerationJob, JobClass, class_weights
from app.transport.base import ModelAvailability
from app.transport.fair_scores import fair_score
from app.transport.queued_tenants import queued_by_tenant, record_queued
from app.transport.redis_bus import CANCEL_CHANNEL, JOB_READY_CHANNEL, KEY_PREFIX, STEER_CHANNEL, RedisBus

logger = logging.getLogger(__name__)

QUEUE_NAME = f"{KEY_PREFIX}:jobs"
#: worker id -> the Unix time its registration expires unless its heartbeat renews it.
WORKERS_KEY = f"{KEY_PREFIX}:workers"
#: Workers that are draining (SIGTERM: finishing what they run, taking nothing new): worker id -> until when.
DRAINING_KEY = f"{KEY_PREFIX}:draining"
#: How long a worker stays the preferred home of an affinity key after its last job with that key.
AFFINITY_TTL_S = 600
#: How often a worker renews its registration.
WORKER_HEARTBEAT_S = 2
#: A worker is counted alive this long after its last heartbeat (live workers, who holds a running job).
WORKER_TTL_S = 15
#: Affinity and reconciliation trust a worker to take jobs from its own queue only while its last heartbeat is
#: this recent (two missed beats and a margin): a worker killed a moment ago stops receiving jobs within
#: seconds, not after the registration's whole TTL.
WORKER_FRESH_S = 5
#: A job sent to a worker's own queue that it has not taken after this long goes back to its model's queue, for
#: any worker (its home may be busy with long generations, or stuck).
AFFINITY_CLAIM_S = 20
GENERATE_TASK = "generate"
#: Fail fast when Redis is down: a create is a 503 in about this long, not a hang.
REDIS_CONNECT_TIMEOUT_S = 2


def model_queue(model: str) -> str:
    """The queue of one model's jobs, which every worker serving that model takes from."""
    return f"{QUEUE_NAME}:model:{model}"


def worker_queue(worker_id: str) -> str:
    """A worker's own queue, for jobs sent to it by affinity (of any model it serves); it takes from its models'
    queues too."""
    return f"{QUEUE_NAME}:{worker_id}"


def model_workers_key(model: str) -> str:
    """The live workers that serve `model` (as WORKERS_KEY, for every worker)."""
    return f"{WORKERS_KEY}:model:{model}"


def job_holder_key(response_id: str) -> str:
    """The id of the worker running this response's job, set while it runs."""
    return f"{KEY_PREFIX}:holder:{response_id}"


def affinity_owner_key(tenant: str, model: str, affinity_key: str) -> str:
    """Where the worker that last ran `tenant`'s jobs of `model` with this key is named. Scoped by tenant, so
    that one tenant's prompt_cache_key never routes to (or reveals) another's, and by model, since a prefix is
    cached only by the model that read it; hashed, so a key's size is bounded."""
    scope = f"{len(tenant)}:{tenant}:{len(model)}:{model}:{affinity_key}"
    digest = hashlib.sha256(scope.encode()).hexdigest()
    return f"{KEY_PREFIX}:affinity:{digest}"


#: Deletes a lock only while it is still the holder's (a lock that expired and was taken since stays).
_RELEASE_LOCK = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


@asynccontextmanager
async def exclusive(redis: ArqRedis, name: str, ttl_s: int) -> AsyncIterator[bool]:
    """A lock across workers: yields whether this caller holds it (someone else does: False, run nothing). It
    expires after `ttl_s`, so a worker that died holding it blocks the others that long at most."""
    key, token = f"{KEY_PREFIX}:lock:{name}", secrets.token_hex(16)
    held = bool(await redis.set(key, token, nx=True, ex=ttl_s))
    try:
        yield held
    finally:
        if held:
            await redis.eval(_RELEASE_LOCK, 1, key, token)  # type: ignore[misc]


def redis_settings(redis_url: str) -> RedisSettings:
    settings = RedisSettings.from_dsn(redis_url)
    settings.conn_timeout = REDIS_CONNECT_TIMEOUT_S
    settings.conn_retries = 1
    return settings


async def register_worker(redis: ArqRedis, worker_id: str, models: Sequence[str], ttl_s: float) -> None:
    """Mark the worker alive, serving `models`, for `ttl_s`; forget workers whose registration has long expired."""
    now = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        for key in (WORKERS_KEY, *(model_workers_key(model) for model in models)):
            pipe.zadd(key, {worker_id: now + ttl_s})
            pipe.zremrangebyscore(key, "-inf", now - 3600)
        await pipe.execute()


async def unregister_worker(redis: ArqRedis, worker_id: str, models: Sequence[str]) -> None:
    async with redis.pipeline(transaction=False) as pipe:
        for key in (WORKERS_KEY, DRAINING_KEY, *(model_workers_key(model) for model in models)):
            pipe.zrem(key, worker_id)
        await pipe.execute()


async def mark_draining(redis: ArqRedis, worker_id: str, until_s: float) -> None:
    """The worker takes no new job from now on (it finishes what it runs): send it none."""
    now = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zadd(DRAINING_KEY, {worker_id: now + until_s})
        pipe.zremrangebyscore(DRAINING_KEY, "-inf", now - 3600)
        await pipe.execute()


class ArqQueue:
    def __init__(self, pool: ArqRedis, weights: ClassWeights | None = None) -> None:
        self.pool = pool
        self.bus = RedisBus(pool)
        #: The classes' shares of the turns (the fair order's weights): every node that enqueues uses the same.
        self.weights = weights or ClassWeights()

    @classmethod
    async def connect(cls, settings: Settings) -> ArqQueue:
        assert settings.redis_url is not None
        pool = await create_pool(redis_settings(settings.redis_url), default_queue_name=QUEUE_NAME)
        return cls(pool, class_weights(settings))

    async def enqueue(self, job: GenerationJob) -> None:
        # A job id that is already queued makes this a no-op: one response is generated once.
        queue = await self._queue_for(job)
        if queue == model_queue(job.model):
            await self._enqueue_fairly(job, queue)
        else:
            # NOTE: a worker's own queue keeps arq's enqueue-time scores (first in, first out): release_stranded
            # reads them as the time a job was sent there, and it moves any job not taken within
            # AFFINITY_CLAIM_S to its model's queue, where the fair order holds.
            await self.pool.enqueue_job(GENERATE_TASK, job.to_payload(), _job_id=job.response_id, _queue_name=queue)
        await self._announce(queue)

    async def _enqueue_fairly(self, job: GenerationJob, queue: str) -> None:
        """Into a model's queue, scored in the fair order (fair_scores.py): each tenant's jobs of a class a flow, the
        flows taking turns by their classes' weights."""
        score_ms = await fair_score(self.pool, queue, job, self.weights)
        enqueued = await self.pool.enqueue_job(
            GENERATE_TASK,
            job.to_payload(),
            _job_id=job.response_id,
            _queue_name=queue,
            # arq takes a job's score from _defer_until; a score in the past runs it as soon as its turn comes.
            _defer_until=datetime.fromtimestamp(score_ms / 1000, tz=UTC),
            # arq would make its record expire a day after its score, which is long past: a day from now.
            _expires=timedelta(milliseconds=self.pool.expires_extra_ms),
        )
        if enqueued is not None:  # None: already queued, and named then
            await record_queued(self.pool, queue, job)

    async def _announce(self, queue: str) -> None:
        """Wake the queue's workers: without it a job waits for their next poll (up to WORKER_POLL_S, most of the
        time to first token). Only a hint: a lost one costs that wait, never the job."""
        await self.pool.publish(JOB_READY_CHANNEL, queue)

    async def _queue_for(self, job: GenerationJob) -> str:
        """The queue of the worker that last ran a job of this model with this one's affinity key (its prefix
        cache likely holds this prompt's start) if it takes jobs now; else the model's queue, which its workers
        take from."""
        if job.affinity_key:
            owner = await self.pool.get(affinity_owner_key(job.tenant, job.model, job.affinity_key))
            if owner is not None and await self._takes_jobs(owner.decode(), job.model):
                return worker_queue(owner.decode())
        return model_queue(job.model)

    async def _is_alive(self, worker_id: str, model: str | None = None) -> bool:
        key = WORKERS_KEY if model is None else model_workers_key(model)
        expires = await self.pool.zscore(key, worker_id)
        return expires is not None and expires > time.time()

    async def _takes_jobs(self, worker_id: str, model: str | None = None) -> bool:
        """Whether the worker's heartbeat is fresh (WORKER_FRESH_S) and it is not draining."""
        key = WORKERS_KEY if model is None else model_workers_key(model)
        async with self.pool.pipeline(transaction=False) as pipe:
            pipe.zscore(key, worker_id)
            pipe.zscore(DRAINING_KEY, worker_id)
            expires, draining = await pipe.execute()
        fresh = expires is not None and expires - WORKER_TTL_S > time.time() - WORKER_FRESH_S
        return fresh and draining is None

    async def requeue(self, job: GenerationJob, previous_owner: str | None) -> None:
        # arq keeps a job's record (and an in-progress lock for an hour) after its worker dies: without clearing
        # them, the new enqueue would be a no-op and no worker would take the job before the lock expired.
        response_id = job.response_id
        async with self.pool.pipeline(transaction=True) as pipe:
            for prefix in (job_key_prefix, in_progress_key_prefix, result_key_prefix, retry_key_prefix):
                pipe.delete(prefix + response_id)
            pipe.zrem(model_queue(job.model), response_id)
            if previous_owner is not None:
                pipe.zrem(worker_queue(previous_owner), response_id)
            await pipe.execute()
        await self._enqueue_fairly(job, model_queue(job.model))
        await self._announce(model_queue(job.model))

    async def job_is_waiting(self, response_id: str) -> bool:
        # arq's job record lives from enqueue to the end of the run, whichever queue holds it.
        return bool(await self.pool.exists(job_key_prefix + response_id, in_progress_key_prefix + response_id))

    async def release_stranded(self) -> int:
        """Jobs sent by affinity to a worker's own queue that no one will take from there go back to their
        models' queues: all of a worker's that is gone (no fresh heartbeat: killed, or restarted under a new
        id) or draining, and those a live one has not taken within AFFINITY_CLAIM_S. How many moved."""
        moved = 0
        async for key in self.pool.scan_iter(match=worker_queue("worker_*"), count=100):
            worker_id = key.decode().removeprefix(worker_queue(""))
            if ":" in worker_id:  # arq's keys beside the queue (its health check)
                continue
            newest = "+inf" if not await self._takes_jobs(worker_id) else (time.time() - AFFINITY_CLAIM_S) * 1000
            for raw in await self.pool.zrangebyscore(key, "-inf", newest):
                if await self.pool.exists(in_progress_key_prefix + raw.decode()):
                    # Running, not waiting (arq keeps a job in its queue until it ends): a dead worker's run is
                    # the lease's to reconcile, a live one's is its own.
                    continue
                info = await Job(raw.decode(), self.pool).info()
                if info is None or not info.args:  # its record is gone: arq drops the id when it polls it
                    continue
                logger.warning("moving %s out of the queue of worker %s, which does not take it", raw, worker_id)
                await self.requeue(GenerationJob.from_payload(info.args[0]), worker_id)
                moved += 1
        return moved

    async def cancel(self, response_id: str) -> None:
        await self.pool.publish(CANCEL_CHANNEL, response_id)

    async def steer(self, response_id: str) -> None:
        await self.pool.publish(STEER_CHANNEL, response_id)

    async def live_workers(self, model: str | None = None) -> int:
        """One sorted-set count, whatever the size of the keyspace."""
        key = WORKERS_KEY if model is None else model_workers_key(model)
        return int(await self.pool.zcount(key, time.time(), "+inf"))

    async def availability(self, models: Sequence[str]) -> dict[str, ModelAvailability]:
        now = time.time()
        async with self.pool.pipeline(transaction=False) as pipe:
            for model in models:
                pipe.zcount(model_workers_key(model), now, "+inf")
                # NOTE: the model's queue only; jobs routed to a worker's own queue (affinity) are taken at once.
                pipe.zcard(model_queue(model))
            replies = await pipe.execute()
        return {
            model: ModelAvailability(live_workers=int(workers), waiting_jobs=int(waiting))
            for model, workers, waiting in zip(models, replies[::2], replies[1::2], strict=True)
        }

    async def queued_by_tenant(self, models: Sequence[str]) -> dict[tuple[str, JobClass], int]:
        # NOTE: the models' queues only, as availability's waiting_jobs: a worker's own queue (affinity) keeps
        # arq's scores, and its jobs are taken at once or moved to their model's queue within AFFINITY_CLAIM_S.
        counts: Counter[tuple[str, JobClass]] = Counter()
        for model in models:
            counts.update(await queued_by_tenant(self.pool, model_queue(model)))
        return dict(counts)

    async def ping(self) -> None:
        await self.pool.ping()

    async def job_alive(self, response_id: str) -> bool:
        # arq keeps a job's key from enqueue until the job ends; the holder key names who runs it.
        if not await self.pool.exists(job_key_prefix + response_id):
            return False
        holder = await self.pool.get(job_holder_key(response_id))
        return holder is None or await self._is_alive(holder.decode())

    async def close(self) -> None:
        await self.pool.aclose()
