"""The /metrics exposition of an API node: the queue's gauges refreshed (from Redis), then every metric."""

from __future__ import annotations

import logging

from app.observability.metrics import QUEUE_DEPTH, REDIS_ERRORS, WORKERS, exposition
from app.runtime import Runtime

logger = logging.getLogger(__name__)


async def render_metrics(runtime: Runtime) -> tuple[bytes, str]:
    """(body, content type). A queue that cannot be read leaves its gauges as they were: metrics matter most
    during an outage, so the scrape still answers."""
    if runtime.settings.embedded:  # this process generates, and its runner reports its own queue
        WORKERS.set(1)
        return exposition()
    try:
        availability = await runtime.queue.availability(runtime.models.ids)
        workers = await runtime.queue.live_workers()
    except Exception as error:
        REDIS_ERRORS.inc()
        logger.warning("could not read the queue's backlog for /metrics (%s)", error)
    else:
        WORKERS.set(workers)
        for model, state in availability.items():
            QUEUE_DEPTH.labels(model).set(state.waiting_jobs or 0)
    return exposition()
