"""A task that runs a job every so often for the life of a process, and never dies silently."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

#: The longest wait after failures in a row (the delay doubles from the interval up to this).
MAX_BACKOFF_S = 60.0


async def run_periodically(
    name: str, interval_s: float, job: Callable[[], Awaitable[object]], *, first_delay_s: float = 0.0
) -> None:
    """Run `job` every `interval_s` (the first time after `first_delay_s`) until cancelled. A failure (a database
    blip) is logged and retried with backoff: one error never ends the loop, as it would an unwatched task."""
    await asyncio.sleep(first_delay_s)
    failures = 0
    while True:
        try:
            await job()
            failures = 0
        except Exception:
            failures += 1
            logger.exception("%s failed (%d in a row); trying again", name, failures)
        delay = interval_s if failures == 0 else min(interval_s * 2 ** (failures - 1), MAX_BACKOFF_S)
        await asyncio.sleep(delay)
