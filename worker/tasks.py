"""A worker's background tasks, each supervised: restarted with backoff when it fails (a Redis restart, a database
blip), so that a worker outlives the outages of what it depends on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from arq.connections import ArqRedis

from app.config import Settings
from app.db.session import Database
from app.jobs.recovery import Reconciler
from app.observability.metrics import WORKER_HEARTBEATS
from app.ops.retention import apply_retention
from app.transport.redis_bus import CANCEL_CHANNEL, JOB_READY_CHANNEL, STEER_CHANNEL, subscribe_confirmed
from app.transport.redis_queue import WORKER_HEARTBEAT_S, WORKER_TTL_S, exclusive, register_worker

logger = logging.getLogger("llama_responses.worker")

#: Backoff of a failed background task (and of arq's polling while Redis is away): doubles up to the cap.
RESTART_BACKOFF_S = (0.5, 30.0)
#: The retention lock outlives any purge (batches of short transactions); a worker that dies holding it delays
#: the next purge by this much at most.
RETENTION_LOCK_TTL_S = 1800


class JobAnnouncements:
    """Jobs announced on JOB_READY_CHANNEL, per queue: each of the process's arq workers waits on its queue's event
    between polls, and the signal listener sets it."""

    def __init__(self) -> None:
        self.events: dict[str, asyncio.Event] = {}

    def event(self, queue_name: str) -> asyncio.Event:
        return self.events.setdefault(queue_name, asyncio.Event())

    def announce(self, queue_name: str) -> None:
        event = self.events.get(queue_name)
        if event is not None:
            event.set()


async def supervise(name: str, task: Callable[[], Awaitable[None]]) -> None:
    """Run `task` for ever: when it fails (or ends), log it and start it again after a pause that grows while
    it keeps failing and starts small again once it has run a while."""
    backoff_s = RESTART_BACKOFF_S[0]
    while True:
        started = time.monotonic()
        try:
            await task()
            logger.warning("%s ended; starting it again in %.1f s", name, backoff_s)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            logger.warning("%s failed (%r); starting it again in %.1f s", name, error, backoff_s)
        if time.monotonic() - started > RESTART_BACKOFF_S[1]:
            backoff_s = RESTART_BACKOFF_S[0]
        await asyncio.sleep(backoff_s)
        backoff_s = min(backoff_s * 2, RESTART_BACKOFF_S[1])


async def listen_for_signals(
    redis: ArqRedis,
    announcements: JobAnnouncements,
    cancel: Callable[[str], None],
    steer: Callable[[str], None] | None = None,
) -> None:
    """Cancel and steer signals, for a stop within a token, and job announcements, for a start without waiting for
    the next poll. A signal missed while this reconnects is not lost: the cancel (or steer) is stored, and each
    generation's heartbeat reads it; the job is found by the next poll."""
    pubsub = redis.pubsub()
    try:
        await subscribe_confirmed(pubsub, CANCEL_CHANNEL)
        await subscribe_confirmed(pubsub, STEER_CHANNEL)
        await subscribe_confirmed(pubsub, JOB_READY_CHANNEL)
        async for message in pubsub.listen():
            if message["type"] != "message":
                continue
            channel = message["channel"].decode()
            if channel == JOB_READY_CHANNEL:
                announcements.announce(message["data"].decode())
            elif channel == STEER_CHANNEL:
                if steer is not None:
                    steer(message["data"].decode())
            else:
                cancel(message["data"].decode())
    finally:
        with contextlib.suppress(Exception):
            await pubsub.aclose()  # type: ignore[no-untyped-call]
    raise ConnectionError("the cancel subscription ended")


async def beat(redis: ArqRedis, worker_id: str, models: Sequence[str]) -> None:
    """Keep the worker registered (alive, serving `models`) while it runs."""
    while True:
        await register_worker(redis, worker_id, models, WORKER_TTL_S)
        WORKER_HEARTBEATS.inc()
        await asyncio.sleep(WORKER_HEARTBEAT_S)


async def reconcile_forever(reconciler: Reconciler, interval_s: float) -> None:
    while True:
        await reconciler.run_round()
        await asyncio.sleep(interval_s)


async def apply_retention_exclusively(redis: ArqRedis, database: Database, settings: Settings) -> None:
    """Purge expired responses and prune finished streams' events, unless another worker does it now: the lock
    keeps a purge that outlasts its cron tick from overlapping the next one."""
    async with exclusive(redis, "retention", RETENTION_LOCK_TTL_S) as held:
        if held:
            await apply_retention(database, settings)
