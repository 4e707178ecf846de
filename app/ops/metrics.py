"""The /metrics exposition of an API node: the queue's gauges refreshed (from Redis), then every metric."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping

from app.generation.job import JobClass
from app.observability.metrics import (
    MODEL_LOADED,
    MODEL_WORKERS,
    QUEUE_DEPTH,
    REDIS_ERRORS,
    TENANT_QUEUED_JOBS,
    WORKERS,
    exposition,
    tenant_label,
)
from app.runtime import Runtime

logger = logging.getLogger(__name__)


async def render_metrics(runtime: Runtime) -> tuple[bytes, str]:
    """(body, content type). A queue that cannot be read leaves its gauges as they were: metrics matter most
    during an outage, so the scrape still answers."""
    try:
        availability = await runtime.queue.availability(runtime.models.ids)
        workers = await runtime.queue.live_workers()
        queued = await runtime.queue.queued_by_tenant(runtime.models.ids)
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
        show_queued_by_tenant(queued)
    return exposition()


def show_queued_by_tenant(queued: Mapping[tuple[str, JobClass], int]) -> None:
    """Set the gauge of queued jobs by tenant label (tenants past the cap summed as `other`) and class. A series
    shown before whose jobs have all left reads 0: Prometheus keeps a series once exposed, and it must not keep
    its last count."""
    by_label: Counter[tuple[str, str]] = Counter()
    for (tenant, job_class), count in queued.items():
        by_label[tenant_label(tenant), job_class] += count
    shown = {
        (sample.labels["tenant"], sample.labels["job_class"])
        for family in TENANT_QUEUED_JOBS.collect()
        for sample in family.samples
    }
    for labels in shown - by_label.keys():
        TENANT_QUEUED_JOBS.labels(*labels).set(0)
    for labels, count in by_label.items():
        TENANT_QUEUED_JOBS.labels(*labels).set(count)
