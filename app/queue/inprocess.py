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
        #: The running jobs by response id (a job's events can only come from its task).
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def enqueue(self, job: GenerationJob) -> None:
        if job.response_id in self._tasks:
            return  # one response is generated once, as with arq's job ids
        task = asyncio.create_task(execute_job(job, self.runner, self.sessionmaker, self.bus))
        self._tasks[job.response_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(job.response_id, None))

    async def cancel(self, response_id: str) -> None:
        self.runner.cancel(response_id)

    async def workers_alive(self) -> bool:
        return True

    async def ping(self) -> None:
        return None

    async def job_alive(self, response_id: str) -> bool:
        return response_id in self._tasks

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.runner.close()
