"""Embedded mode's waiting room: a model's jobs beyond its engine's sequences wait here, and are admitted in the
fair order (generation/job.py's FairOrder: class first, then tenants in turn, each tenant's jobs in order).
Distributed mode writes the same order into its Redis scores (fair_scores.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.generation.job import FairOrder, GenerationJob, JobClass

#: Places of a model (when it has more than one) that only interactive jobs may take: a client waiting on a
#: foreground create starts at once, beside the background and batch work, instead of after one of them ends.
KEPT_FOR_INTERACTIVE = 1


class WaitingRoom:
    """Embedded mode's jobs of one model: at most `places` run at once (the engine's sequences), background and
    batch ones at most all but KEPT_FOR_INTERACTIVE; the others wait here, and each place that frees goes to the
    next job in the fair order that may take it.

    Jobs wait here before their execution claims them, so a waiting response is `queued` (as it is in Redis in
    distributed mode): the cap on a tenant's queued background jobs counts it, and it holds no lease.
    """

    def __init__(self, places: int) -> None:
        #: Jobs run at once; 0: no limit (every job starts at once, as the fake engine's tests want).
        self.places = places
        self.running = 0
        #: Of those, background and batch jobs, which may not take the places kept for interactive ones.
        self.running_deferrable = 0
        self._waiting: FairOrder[asyncio.Future[None]] = FairOrder()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def waiting_by_tenant(self) -> dict[tuple[str, JobClass], int]:
        """The jobs waiting here, by tenant and class (not those running)."""
        return self._waiting.waiting_by_tenant()

    @asynccontextmanager
    async def place(self, job: GenerationJob) -> AsyncIterator[None]:
        """Wait for a place, in the fair order, and hold it for the block."""
        await self._enter(job)
        try:
            yield
        finally:
            self._leave(job.job_class)

    def _has_room(self, job_class: JobClass) -> bool:
        if not self.places:
            return True
        if self.running >= self.places:
            return False
        kept = KEPT_FOR_INTERACTIVE if self.places > KEPT_FOR_INTERACTIVE else 0
        return job_class == "interactive" or self.running_deferrable < self.places - kept

    async def _enter(self, job: GenerationJob) -> None:
        turn = asyncio.get_running_loop().create_future()
        self._waiting.push(job.job_class, job.tenant, turn)
        self._hand_over()
        if turn.done():
            return  # its place was free, and nobody waiting had the turn before it
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._leave(job.job_class)  # the place was handed over just as its waiter went: pass it on
            else:
                self._waiting.remove(job.job_class, job.tenant, turn)
            raise

    def _leave(self, job_class: JobClass) -> None:
        self.running -= 1
        if job_class != "interactive":
            self.running_deferrable -= 1
        self._hand_over()

    def _hand_over(self) -> None:
        """Free places to the waiting jobs, in the fair order, counted before they wake: nobody can take them
        meanwhile. The most urgent class waiting goes first; when it may not take a place, no less urgent one may."""
        while (job_class := self._waiting.next_class()) is not None and self._has_room(job_class):
            turn = self._waiting.pop()
            if turn.done():
                continue
            self.running += 1
            if job_class != "interactive":
                self.running_deferrable += 1
            turn.set_result(None)
