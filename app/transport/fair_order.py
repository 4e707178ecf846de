"""Embedded mode's waiting room: a model's jobs beyond its engine's sequences wait here, and are admitted in the
fair order (generation/job.py's FairOrder: each tenant's jobs of a class a flow, the flows taking turns by their
classes' weights, each tenant's jobs in order). Distributed mode writes the same order into its Redis scores
(fair_scores.py).

An interactive job that finds every place taken while its tenant holds less than its fair share of them has a
running background or batch job of another tenant preempted (`Preempt`): that job stores its progress between
two tokens and gives its place back, then waits here first of its tenant's jobs and goes on from where it was."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from app.generation.job import JOB_CLASSES, ClassWeights, FairOrder, GenerationJob, JobClass

#: Places of a model (when it has more than one) that only interactive jobs may take: a client waiting on a
#: foreground create starts at once, beside the background and batch work, instead of after one of them ends.
KEPT_FOR_INTERACTIVE = 1

#: Asks the job running with this response id to give its place back at its next safe boundary (between two
#: tokens, never inside a tool call), its progress stored: whether it will (app/jobs' JobExecutor.preempt).
Preempt = Callable[[str], bool]


@dataclass(eq=False)
class Place:
    """One job's place (or its wait for one)."""

    job: GenerationJob
    #: Asked to give the place back, which went to the waiting job at once (the engine starts that one on the
    #: preempted one's sequence as soon as it stops); once its run has handed the job back, the job waits again.
    preempted: bool = False


class WaitingRoom:
    """Embedded mode's jobs of one model: at most `places` run at once (the engine's sequences), background and
    batch ones at most all but KEPT_FOR_INTERACTIVE; the others wait here, and each place that frees goes to the
    next job in the fair order that may take it.

    Jobs wait here before their execution claims them, so a waiting response is `queued` (as it is in Redis in
    distributed mode): the cap on a tenant's queued background jobs counts it, and it holds no lease.
    """

    def __init__(self, places: int, preempt: Preempt | None = None, weights: ClassWeights | None = None) -> None:
        #: Jobs run at once; 0: no limit (every job starts at once, as the fake engine's tests want).
        self.places = places
        self.running = 0
        #: Of those, background and batch jobs, which may not take the places kept for interactive ones.
        self.running_deferrable = 0
        #: None: no job is ever preempted.
        self.preempt = preempt
        self._waiting: FairOrder[tuple[asyncio.Future[None], Place]] = FairOrder(weights)
        #: The places taken, in the order they were: the youngest last.
        self._held: list[Place] = []

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def waiting_by_tenant(self) -> dict[tuple[str, JobClass], int]:
        """The jobs waiting here, by tenant and class (not those running)."""
        return self._waiting.waiting_by_tenant()

    @asynccontextmanager
    async def place(self, job: GenerationJob, *, resumed: bool = False) -> AsyncIterator[Place]:
        """Wait for a place, in the fair order, and hold it for the block (`resumed`: a preempted job, which
        waits before the other jobs of its tenant and class). Its `preempted` says, after the block, whether the
        job was asked to give its place back (and so may have been handed back to be run again)."""
        held = Place(job)
        await self._enter(held, first=resumed)
        try:
            yield held
        finally:
            self._leave(held)

    def _open_classes(self) -> tuple[JobClass, ...]:
        """The classes a free place may go to now: every class, only interactive (the places left are kept for
        it), or none (every place is taken)."""
        if not self.places:
            return JOB_CLASSES
        if self.running >= self.places:
            return ()
        kept = KEPT_FOR_INTERACTIVE if self.places > KEPT_FOR_INTERACTIVE else 0
        return JOB_CLASSES if self.running_deferrable < self.places - kept else ("interactive",)

    async def _enter(self, held: Place, *, first: bool) -> None:
        job = held.job
        turn = asyncio.get_running_loop().create_future()
        self._waiting.push(job.job_class, job.tenant, (turn, held), first=first)
        self._hand_over()
        if turn.done():
            return  # its place was free, and nobody waiting had the turn before it
        if job.job_class == "interactive":
            self._preempt_for(job.tenant)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._leave(held)  # the place was handed over just as its waiter went: pass it on
            else:
                self._waiting.remove(job.job_class, job.tenant, (turn, held))
            raise

    def _leave(self, held: Place, to: tuple[JobClass, ...] = JOB_CLASSES) -> None:
        if held.preempted:
            return  # its place was passed on when it was asked to give it back
        self._held.remove(held)
        self.running -= 1
        if held.job.job_class != "interactive":
            self.running_deferrable -= 1
        self._hand_over(to)

    def _hand_over(self, to: tuple[JobClass, ...] = JOB_CLASSES) -> None:
        """Free places to the waiting jobs of the classes `to`, in the fair order, counted before they wake: nobody
        can take them meanwhile. Each goes to the job whose turn it is among the classes that may take it (the
        places kept for interactive jobs to an interactive one only)."""
        while (classes := tuple(name for name in self._open_classes() if name in to)) and (
            entry := self._waiting.pop_from(classes)
        ) is not None:
            turn, held = entry
            if turn.done():
                continue
            self.running += 1
            if held.job.job_class != "interactive":
                self.running_deferrable += 1
            self._held.append(held)
            turn.set_result(None)

    def _preempt_for(self, tenant: str) -> None:
        """An interactive job of `tenant` waits, every place taken. If its tenant holds less than its fair share
        of the places (the places over the tenants holding some, itself counted), one running background or batch
        job of another tenant that holds more than its share is asked to give its place back: of the tenant
        holding the most, the youngest (the least work lost to a slower resume, the oldest nearest its end).

        The place is passed on at once, to the job whose turn it is (this one, unless another tenant's interactive
        job waited before it): the engine starts that job's sequence as soon as the preempted one's stops, between
        two steps, while its run stores its progress. A tenant alone never preempts its own work: its interactive
        jobs have the kept place, as before."""
        if self.preempt is None or not self.places:
            return
        holding = Counter(held.job.tenant for held in self._held if not held.preempted)
        share = max(self.places // len(holding.keys() | {tenant}), 1)
        if holding[tenant] >= share:
            return
        candidates = [
            held
            for held in reversed(self._held)
            if not held.preempted
            and held.job.job_class != "interactive"
            and held.job.tenant != tenant
            and holding[held.job.tenant] > share
        ]
        candidates.sort(key=lambda held: -holding[held.job.tenant])  # stable: the youngest first within a tenant
        for held in candidates:
            if self.preempt(held.job.response_id):
                # The place freed for an interactive job goes to one (this one, unless another tenant's waited
                # before it), not to whichever job's turn it is: that could be the preempted class's own.
                self._leave(held, to=("interactive",))
                held.preempted = True
                return
