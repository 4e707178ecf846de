"""Embedded mode's backend: jobs run as tasks of this process on its own engine; events fan out in memory."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.ids import new_id
from app.queue.base import GenerationJob, ModelAvailability, ModelRunner
from app.queue.memory_bus import MemoryBus
from app.services.execution import DEFAULT_LEASE_S, execute_job


class InProcessQueue:
    def __init__(
        self, runner: ModelRunner, sessionmaker: async_sessionmaker[AsyncSession], lease_s: float = DEFAULT_LEASE_S
    ) -> None:
        self.runner = runner
        self.sessionmaker = sessionmaker
        self.bus = MemoryBus()
        #: This process's lease owner id: a lease left by an earlier run of the server is not ours.
        self.owner = new_id("node")
        self.lease_s = lease_s
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def enqueue(self, job: GenerationJob) -> None:
        if job.response_id in self._tasks:
            return  # one response is generated once
        run = execute_job(job, self.runner, self.sessionmaker, self.bus, owner=self.owner, lease_s=self.lease_s)
        task = asyncio.create_task(run)
        self._tasks[job.response_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(job.response_id, None))

    async def requeue(self, job: GenerationJob, previous_owner: str | None) -> None:
        await self.enqueue(job)

    async def job_is_waiting(self, response_id: str) -> bool:
        return response_id in self._tasks

    async def cancel(self, response_id: str) -> None:
        self.runner.cancel(response_id)

    async def live_workers(self, model: str | None = None) -> int:
        return 1

    async def availability(self, models: Sequence[str]) -> dict[str, ModelAvailability]:
        """This process runs every model; a pool says which are in memory now."""
        loaded = self.runner.loaded()
        return {model: ModelAvailability(1, None if loaded is None else model in loaded) for model in models}

    async def ping(self) -> None:
        return None

    async def job_alive(self, response_id: str) -> bool:
        return response_id in self._tasks

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        await self.runner.close()
