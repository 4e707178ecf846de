"""Embedded mode's event bus: fan-out between tasks of this one process."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any


class MemorySubscription:
    def __init__(self, bus: MemoryBus, response_id: str) -> None:
        self._bus = bus
        self._response_id = response_id
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def next(self, timeout_s: float) -> dict[str, Any] | None:
        # One event a token: one already queued is taken at once, and a wait needs no task of its own (wait_for
        # makes one per call before Python 3.12), so each event costs the relay one wake-up, not three.
        if not self.events.empty():
            return self.events.get_nowait()
        try:
            async with asyncio.timeout(timeout_s):
                return await self.events.get()
        except TimeoutError:
            return None

    async def close(self) -> None:
        subscribers = self._bus.subscribers.get(self._response_id)
        if subscribers is not None:
            subscribers.discard(self)
            if not subscribers:
                del self._bus.subscribers[self._response_id]


class MemoryBus:
    def __init__(self) -> None:
        self.subscribers: defaultdict[str, set[MemorySubscription]] = defaultdict(set)

    async def publish(self, response_id: str, event: dict[str, Any]) -> None:
        for subscription in self.subscribers.get(response_id, ()):
            subscription.events.put_nowait(event)

    async def subscribe(self, response_id: str) -> MemorySubscription:
        subscription = MemorySubscription(self, response_id)
        self.subscribers[response_id].add(subscription)
        return subscription
