"""How the job side writes: to the database through blips (retried up to a budget), to the live bus best-effort."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from app.errors import is_outage
from app.observability.metrics import REDIS_ERRORS
from app.transport.base import EventBus

logger = logging.getLogger(__name__)

#: Waits between tries of a write that failed on a database blip (then the last one repeats).
RETRY_DELAYS_S = (0.1, 0.2, 0.5, 1.0, 2.0)


async def store_with_retries(store: Callable[[], Awaitable[None]], *, budget_s: float) -> None:
    """Run a write, trying again while the database is down for up to `budget_s` (a blip keeps the generation
    going; an outage longer than the lease gives the job to reconciliation). Any other error (a constraint, a
    bug) is raised at once: the same write would fail the same way for the whole lease."""
    deadline = time.monotonic() + budget_s
    attempt = 0
    while True:
        try:
            await store()
            return
        except Exception as error:
            if not is_outage(error):
                raise
            delay = RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)]
            if time.monotonic() + delay > deadline:
                raise
            logger.warning("database write failed (%s); trying again in %.1f s", type(error).__name__, delay)
            attempt += 1
            await asyncio.sleep(delay)


async def publish_quietly(bus: EventBus, response_id: str, event: dict[str, Any]) -> None:
    """Live fan-out only: a Redis blip costs live subscribers an event (the stored ones fill the gap, the stored
    row ends the stream), never the generation."""
    try:
        await bus.publish(response_id, event)
    except Exception as error:
        REDIS_ERRORS.inc()
        logger.warning("could not publish an event of %s (%s)", response_id, error)
