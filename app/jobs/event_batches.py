"""A background stream's events, stored in small batches (by time and by count) and published right after the
commit that stored them: a client is sent only what is stored, and the database takes one write per batch
rather than one per token."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

#: A batch is stored at most this long after the previous one began (the first event after a quiet spell goes at
#: once): live readers see tokens in bursts of this length. bench/event_writes.py measured the writes it saves.
EVENT_FLUSH_MS = 50.0
#: ...or as soon as this many events wait: the relay then waits for that write, so a slow database slows the
#: relay rather than letting unstored events pile up. Past ~32 events a batch, Postgres gains little more.
EVENT_FLUSH_EVENTS = 32

Payload = dict[str, Any]
#: Stores one batch in one transaction (or raises); whatever it stores beside the events (the progress a takeover
#: continues from) it must read before its first await, so that it matches the events it was given.
BatchWriter = Callable[[list[Payload]], Awaitable[None]]
Publisher = Callable[[Payload], Awaitable[None]]


class EventBatch:
    """Events waiting to be stored, flushed by a timer, by count, or on demand (the final state, a hand-over)."""

    def __init__(
        self,
        write: BatchWriter,
        publish: Publisher,
        *,
        flush_ms: float = EVENT_FLUSH_MS,
        flush_events: int = EVENT_FLUSH_EVENTS,
    ) -> None:
        self._write = write
        self._publish = publish
        self.interval_s = flush_ms / 1000
        self.max_events = flush_events
        #: Generated, neither stored nor sent: kept until the write that stores them commits.
        self.pending: list[Payload] = []
        #: The write that failed: nothing after it is stored or sent (raised at the next add or flush).
        self.failure: Exception | None = None
        self._lock = asyncio.Lock()  # one write at a time, each published before the next: events stay in order
        self._timer: asyncio.Task[None] | None = None
        self._last_flush_s = -math.inf

    async def add(self, payloads: Sequence[Payload]) -> None:
        """Queue events; stored within the flush interval, or now (waiting for it) once a batch is full."""
        if self.failure is not None:
            raise self.failure
        self.pending.extend(payloads)
        if len(self.pending) >= self.max_events:
            await self.flush()
        elif self.pending and (self._timer is None or self._timer.done()):
            self._timer = asyncio.create_task(self._flush_on_time())

    async def flush(self, final: Sequence[Payload] = (), write: BatchWriter | None = None) -> None:
        """Store what is pending, and `final` after it, in one write (`write`, else the batch's own), then
        publish it all. A failed write is kept as `failure` and raised."""
        async with self._lock:
            if self.failure is not None:
                raise self.failure
            count = len(self.pending)
            payloads = [*self.pending, *final]
            if not payloads:
                return
            self._last_flush_s = time.monotonic()
            try:
                await (write or self._write)(payloads)
            except Exception as error:
                self.failure = error
                raise
            del self.pending[:count]
            for payload in payloads:
                await self._publish(payload)

    async def _flush_on_time(self) -> None:
        """The timer: stores what waits once the interval since the last write has passed, until nothing waits.
        A failure is left for the relay to raise at its next event (or the final write)."""
        with contextlib.suppress(Exception):
            while self.pending and self.failure is None:
                delay_s = self._last_flush_s + self.interval_s - time.monotonic()
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
                await self.flush()

    async def stop(self) -> None:
        """Stop the timer, after the write it may be making: the owner stores what is left itself, or gives it up."""
        timer = self._timer
        if timer is None:
            return
        async with self._lock:
            timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await timer
