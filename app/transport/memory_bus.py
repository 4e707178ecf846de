"""Embedded mode's event bus: fan-out between tasks of this one process."""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from typing import Any


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class MemorySubscription:
    def __init__(self, bus: MemoryBus, response_id: str) -> None:
        self._bus = bus
        self._response_id = response_id
        self.events: deque[dict[str, Any]] = deque()
        #: The relay's wait for the next event, while it waits.
        self._waiter: asyncio.Future[None] | None = None

    def put(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next(self, timeout_s: float) -> dict[str, Any] | None:
        # One event a token: one already there is taken at once; a wait is one future and one timer, not an
        # asyncio.Queue's getter and an asyncio.timeout's context (a third of the cost, bench/stream_overhead.py).
        if self.events:
            return self.events.popleft()
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout_s, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
        return self.events.popleft() if self.events else None

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
            subscription.put(event)

    async def subscribe(self, response_id: str) -> MemorySubscription:
        subscription = MemorySubscription(self, response_id)
        self.subscribers[response_id].add(subscription)
        return subscription
