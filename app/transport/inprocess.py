"""Embedded mode's backend: jobs run as tasks of this process, by the executor it is handed; events fan out in
memory."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from app.generation.job import GenerationJob
from app.transport.base import JobExecutor, ModelAvailability
from app.transport.memory_bus import MemoryBus


class InProcessQueue:
    def __init__(self, executor: JobExecutor, bus: MemoryBus) -> None:
        self.executor = executor
        #: The bus the executor publishes to (made first: the executor is built with it).
        self.bus = bus
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def enqueue(self, job: GenerationJob) -> None:
        if job.response_id in self._tasks:
            return  # one response is generated once
        task = asyncio.create_task(self.executor.execute(job))
        self._tasks[job.response_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(job.response_id, None))

    async def requeue(self, job: GenerationJob, previous_owner: str | None) -> None:
        await self.enqueue(job)

    async def job_is_waiting(self, response_id: str) -> bool:
        return response_id in self._tasks

    async def release_stranded(self) -> int:
        return 0  # one process: every job waits where it runs

    async def cancel(self, response_id: str) -> None:
        self.executor.cancel(response_id)

    async def live_workers(self, model: str | None = None) -> int:
        return 1

    async def availability(self, models: Sequence[str]) -> dict[str, ModelAvailability]:
        """This process runs every model; a pool says which are in memory now."""
        loaded = self.executor.loaded()
        return {model: ModelAvailability(1, None if loaded is None else model in loaded) for model in models}

    async def ping(self) -> None:
        return None

    async def job_alive(self, response_id: str) -> bool:
        return response_id in self._tasks

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        await self.executor.close()
