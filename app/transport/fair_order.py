"""Embedded mode's waiting room: a model's jobs beyond its engine's sequences wait here, and are admitted in the
fair order (generation/job.py's FairOrder: class first, then tenants in turn, each tenant's jobs in order).
Distributed mode writes the same order into its Redis scores (fair_scores.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.generation.job import FairOrder, GenerationJob


class WaitingRoom:
    """Embedded mode's jobs of one model: at most `places` run at once (the engine's sequences); the others wait
    here, and each place that frees goes to the next job in the fair order.

    Jobs wait here before their execution claims them, so a waiting response is `queued` (as it is in Redis in
    distributed mode): the cap on a tenant's queued background jobs counts it, and it holds no lease.
    """

    def __init__(self, places: int) -> None:
        #: Jobs run at once; 0: no limit (every job starts at once, as the fake engine's tests want).
        self.places = places
        self.running = 0
        self._waiting: FairOrder[asyncio.Future[None]] = FairOrder()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @asynccontextmanager
    async def place(self, job: GenerationJob) -> AsyncIterator[None]:
        """Wait for a place, in the fair order, and hold it for the block."""
        await self._enter(job)
        try:
            yield
        finally:
            self._leave()

    def _has_room(self) -> bool:
        return not self.places or self.running < self.places

    async def _enter(self, job: GenerationJob) -> None:
        if self._has_room() and not self._waiting:
            self.running += 1
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting.push(job.job_class, job.tenant, turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._leave()  # the place was handed over just as its waiter went: pass it on
            else:
                self._waiting.remove(job.job_class, job.tenant, turn)
            raise

    def _leave(self) -> None:
        self.running -= 1
        # The place is handed over here, counted before the waiter wakes: nobody can take it meanwhile.
        while self._waiting and self._has_room():
            turn = self._waiting.pop()
            if not turn.done():
                self.running += 1
                turn.set_result(None)
