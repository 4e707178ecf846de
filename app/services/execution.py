"""Runs one generation job where the model is (embedded server or worker): events out, final state stored.

Every event goes to the bus (live fan-out) and, for background streams, to the database first; the final
Response is committed before its terminal event is published, so a client that chains the moment it sees
`response.completed` finds it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.base import utc_now
from app.db.repositories import responses as repository
from app.generation.types import Finish, GenerationFailed, ScoredPiece
from app.queue.base import EventBus, GenerationJob, GenerationRun, ModelRunner
from app.schemas.events import ResponseEvent
from app.schemas.responses import ResponseObject
from app.services.assembly import ResponseAssembler
from app.services.finished_items import record_final_items

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 5.0


class JobExecution:
    def __init__(self, job: GenerationJob, sessionmaker: async_sessionmaker[AsyncSession], bus: EventBus) -> None:
        self.job = job
        self.sessionmaker = sessionmaker
        self.bus = bus
        self.assembler = ResponseAssembler(
            ResponseObject.model_validate(job.response),
            job.functions,
            job.reasoning_tags,
            custom_tools=set(job.custom_tools),
            encrypted_reasoning=job.encrypted_reasoning,
            leading_items=job.leading_items,
            logprobs=job.sampling.top_logprobs is not None,
            parallel_tool_calls=job.parallel_tool_calls,
            announced=job.announced,
        )

    async def _claim(self) -> bool:
        """queued -> in_progress, conditionally: False when the response was cancelled (or another worker has it)."""
        if not self.job.store:
            return True
        async with self.sessionmaker() as session, session.begin():
            return await repository.transition(
                session,
                self.job.response_id,
                from_statuses=("queued",),
                values={"status": "in_progress", "heartbeat_at": utc_now()},
            )

    async def _emit(self, events: list[ResponseEvent], *, final: ResponseObject | None = None) -> None:
        payloads = [event.model_dump(mode="json") for event in events]
        if final is not None or self.job.keep_events:
            async with self.sessionmaker() as session, session.begin():
                if self.job.keep_events:
                    await repository.insert_events(session, self.job.response_id, payloads)
                if final is not None and (
                    not self.job.store
                    or await repository.transition(
                        session, final.id, from_statuses=("queued", "in_progress"), values=final_values(final)
                    )
                ):
                    await record_final_items(session, self.job, final)
        for payload in payloads:
            await self.bus.publish(self.job.response_id, payload)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            async with self.sessionmaker() as session, session.begin():
                await repository.transition(
                    session, self.job.response_id, from_statuses=("in_progress",), values={"heartbeat_at": utc_now()}
                )

    async def _close(self, output: Finish | GenerationFailed) -> None:
        if isinstance(output, GenerationFailed):
            events = self.assembler.fail(output.message)
        else:
            events = self.assembler.finish(output, completed_at=int(time.time()))
        keeps_state = self.job.store or self.job.conversation_id is not None
        await self._emit(events, final=self.assembler.response if keeps_state else None)

    async def run(self, runner: ModelRunner) -> None:
        if not await self._claim():
            logger.info("response %s is no longer queued; not generating it", self.job.response_id)
            return
        self.assembler.response.status = "in_progress"
        await self._emit(self.assembler.start())
        generation = runner.start(self.job)
        heartbeat = asyncio.create_task(self._heartbeat()) if self.job.store else None
        finished = False
        try:
            finished = await self._relay(generation)
        finally:
            if heartbeat is not None:
                heartbeat.cancel()
            if not finished:
                # Stopped from outside (shutdown, a lost connection): stop the model and store what it made.
                generation.cancel()
                with anyio.CancelScope(shield=True):
                    await self._relay(generation)

    async def _relay(self, generation: GenerationRun) -> bool:
        outputs: AsyncIterator[Any] = generation.outputs()
        async for output in outputs:
            if isinstance(output, str | ScoredPiece):
                await self._emit(self.assembler.text(output))
            else:
                await self._close(output)
                return True
        return False


def final_values(response: ResponseObject) -> dict[str, Any]:
    """The columns a terminal Response sets, in one conditional update with its status."""
    return {
        "status": response.status,
        "output": [item.model_dump(mode="json") for item in response.output],
        "usage": response.usage.model_dump(mode="json") if response.usage else None,
        "error": response.error.model_dump(mode="json") if response.error else None,
        "incomplete_details": response.incomplete_details.model_dump(mode="json")
        if response.incomplete_details
        else None,
        "completed_at": datetime.fromtimestamp(response.completed_at, UTC) if response.completed_at else None,
    }


async def execute_job(
    job: GenerationJob, runner: ModelRunner, sessionmaker: async_sessionmaker[AsyncSession], bus: EventBus
) -> None:
    await JobExecution(job, sessionmaker, bus).run(runner)
