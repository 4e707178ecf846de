"""The /metrics exposition of an API node: the queue's gauges refreshed (from Redis), then every metric."""

from __future__ import annotations

import logging

from app.observability.metrics import MODEL_LOADED, MODEL_WORKERS, QUEUE_DEPTH, REDIS_ERRORS, WORKERS, exposition
from app.runtime import Runtime

logger = logging.getLogger(__name__)


async def render_metrics(runtime: Runtime) -> tuple[bytes, str]:
    """(body, content type). A queue that cannot be read leaves its gauges as they were: metrics matter most
    during an outage, so the scrape still answers."""
    try:
        availability = await runtime.queue.availability(runtime.models.ids)
        workers = await runtime.queue.live_workers()
    except Exception as error:
        REDIS_ERRORS.inc()
        logger.warning("could not read the queue's backlog for /metrics (%s)", error)
    else:
        WORKERS.set(workers)
        for model, state in availability.items():
            MODEL_WORKERS.labels(model).set(state.live_workers)
            if state.loaded is not None:
                MODEL_LOADED.labels(model).set(int(state.loaded))
            # Distributed: the Redis queue's backlog; embedded: the jobs in the waiting room.
            if state.waiting_jobs is not None:
                QUEUE_DEPTH.labels(model).set(state.waiting_jobs)
    return exposition()
