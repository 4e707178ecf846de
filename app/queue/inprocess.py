"""Embedded mode's backend: jobs run as tasks of this process on its own engine; events fan out in memory."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.queue.base import GenerationJob, ModelRunner
from app.queue.memory_bus import MemoryBus
from app.services.execution import execute_job


class InProcessQueue:
    def __init__(self, runner: ModelRunner, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self.runner = runner
        self.sessionmaker = sessionmaker
        self.bus = MemoryBus()
        self._tasks: set[asyncio.Task[None]] = set()

    async def enqueue(self, job: GenerationJob) -> None:
        task = asyncio.create_task(execute_job(job, self.runner, self.sessionmaker, self.bus))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel(self, response_id: str) -> None:
        self.runner.cancel(response_id)

    async def workers_alive(self) -> bool:
        return True

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.runner.close()
