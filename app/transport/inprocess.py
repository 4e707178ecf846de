"""Embedded mode's backend: jobs run as tasks of this process, by the executor it is handed, each model's at most
`places` at once (its engine's sequences) and the others in a fair waiting room (fair_order.py), which may preempt
a running background job for another tenant's interactive one; events fan out in memory."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

from app.generation.job import ClassWeights, GenerationJob, JobClass
from app.transport.base import JobExecutor, ModelAvailability
from app.transport.fair_order import WaitingRoom
from app.transport.memory_bus import MemoryBus


class InProcessQueue:
    def __init__(
        self, executor: JobExecutor, bus: MemoryBus, *, places: int = 0, weights: ClassWeights | None = None
    ) -> None:
        self.executor = executor
        #: The bus the executor publishes to (made first: the executor is built with it).
        self.bus = bus
        #: Jobs of one model run at once (0: no limit): the others wait in its room, still `queued`.
        self.places = places
        #: The classes' shares of the places that free (the fair order's weights).
        self.weights = weights or ClassWeights()
        self._rooms: dict[str, WaitingRoom] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def enqueue(self, job: GenerationJob) -> None:
        if job.response_id in self._tasks:
            return  # one response is generated once
        task = asyncio.create_task(self._run(job))
        self._tasks[job.response_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(job.response_id, None))

    def _room(self, model: str) -> WaitingRoom:
        room = self._rooms.get(model)
        if room is None:
            room = self._rooms[model] = WaitingRoom(self.places, self.executor.preempt, self.weights)
        return room

    async def _run(self, job: GenerationJob) -> None:
        # A place is held for the whole execution, its final commit included: the engine's sequence is free that
        # commit earlier, which the next job waits for (milliseconds, against a generation's seconds).
        # NOTE: a cancel signal for a job still waiting here finds no generation to stop, as one for a job still
        # in Redis does in distributed mode: a stored cancel is read by its claim; a foreground job whose client
        # left runs once its turn comes (its row must end somehow, and a conversation's claim be released).
        # A preempted job (the room asked it to give its place back) waits again, before its tenant's others; its
        # run handed it back with its progress, and the next one goes on from there. If it ended first, the next
        # run's claim finds it ended and does nothing.
        resumed = False
        while True:
            async with self._room(job.model).place(job, resumed=resumed) as held:
                await self.executor.execute(job)
            if not held.preempted:
                return
            resumed = True

    async def requeue(self, job: GenerationJob, previous_owner: str | None) -> None:
        await self.enqueue(job)

    async def job_is_waiting(self, response_id: str) -> bool:
        return response_id in self._tasks

    async def release_stranded(self) -> int:
        return 0  # one process: every job waits where it runs

    async def cancel(self, response_id: str) -> None:
        self.executor.cancel(response_id)

    async def steer(self, response_id: str) -> None:
        self.executor.steer(response_id)

    async def live_workers(self, model: str | None = None) -> int:
        return 1

    async def availability(self, models: Sequence[str]) -> dict[str, ModelAvailability]:
        """This process runs every model; a pool says which are in memory now; its room how many jobs wait."""
        loaded = self.executor.loaded()
        return {
            model: ModelAvailability(
                1, None if loaded is None else model in loaded, waiting_jobs=self._room(model).waiting
            )
            for model in models
        }

    async def queued_by_tenant(self, models: Sequence[str]) -> dict[tuple[str, JobClass], int]:
        counts: Counter[tuple[str, JobClass]] = Counter()
        for model in models:
            if (room := self._rooms.get(model)) is not None:
                counts.update(room.waiting_by_tenant())
        return dict(counts)

    async def ping(self) -> None:
        return None

    async def job_alive(self, response_id: str) -> bool:
        return response_id in self._tasks

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        await self.executor.close()
