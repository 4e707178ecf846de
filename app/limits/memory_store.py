"""Embedded mode's buckets: in this process (one API process serves the whole deployment), on an injectable clock."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from app.limits.buckets import BucketStep, Limit, Step, after_step, refilled, refuses

#: Past this many partial buckets, the full ones are dropped (a full bucket is the same as none).
SWEEP_AT = 4096


class MemoryBucketStore:
    """NOTE: in memory on purpose, as TenantSlots is: a bucket refills within a minute, so a restart loses at most
    one minute's count."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        #: (tenant, limit) -> (level, when it was that level, capacity).
        self._buckets: dict[tuple[str, Limit], tuple[float, float, int]] = {}

    async def apply(self, tenant: str, steps: Sequence[BucketStep]) -> tuple[int | None, list[float]]:
        now = self.clock()
        levels = []
        for step in steps:
            level, at, _ = self._buckets.get((tenant, step.limit), (float(step.capacity), now, step.capacity))
            levels.append(refilled(level, at, now, step.capacity))
        refused = next((index for index, step in enumerate(steps) if refuses(levels[index], step)), None)
        if refused is not None:
            return refused, levels
        for index, step in enumerate(steps):
            if step.step is Step.PEEK:
                continue
            levels[index] = after_step(levels[index], step)
            key = (tenant, step.limit)
            if levels[index] >= step.capacity:
                self._buckets.pop(key, None)
            else:
                self._buckets[key] = (levels[index], now, step.capacity)
        if len(self._buckets) > SWEEP_AT:
            self._sweep(now)
        return None, levels

    def _sweep(self, now: float) -> None:
        for key, (level, at, capacity) in list(self._buckets.items()):
            if refilled(level, at, now, capacity) >= capacity:
                del self._buckets[key]

    async def close(self) -> None:
        self._buckets.clear()
