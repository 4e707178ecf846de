"""What a generation job's runs share: replayable ids, the assembler rebuilt from stored progress, storing through
database blips, best-effort publishing, and the terminal event that a stored row stands for."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import ResponseRow
from app.db.repositories import jobs
from app.db.repositories import responses as repository
from app.errors import is_outage
from app.ids import new_id
from app.observability.metrics import REDIS_ERRORS
from app.queue.base import EventBus, GenerationJob
from app.schemas.events import ResponseLifecycleEvent
from app.schemas.responses import TERMINAL_STATUSES, ResponseObject
from app.services.assembly import ResponseAssembler
from app.services.snapshots import response_from_row

logger = logging.getLogger(__name__)

#: Waits between tries of a write that failed on a database blip (then the last one repeats).
RETRY_DELAYS_S = (0.1, 0.2, 0.5, 1.0, 2.0)
TERMINAL_TYPES = frozenset(f"response.{status}" for status in TERMINAL_STATUSES)


class LeaseLost(Exception):
    """The job's lease is no longer ours: another worker took it over, or the response ended meanwhile."""


class IdLog:
    """The ids an assembler gives out, recorded: a takeover that replays the same pieces gets the same ids, so
    the events it rebuilds are the ones already sent."""

    def __init__(self, recorded: list[str]) -> None:
        self.recorded = list(recorded)
        self._next = 0

    def __call__(self, prefix: str) -> str:
        if self._next == len(self.recorded):
            self.recorded.append(new_id(prefix))
        self._next += 1
        return self.recorded[self._next - 1]


def job_assembler(job: GenerationJob, ids: IdLog) -> ResponseAssembler:
    """The assembler a run of `job` grows its Response with, taking its item ids from `ids`."""
    return ResponseAssembler(
        ResponseObject.model_validate(job.response),
        job.functions,
        job.reasoning_tags,
        custom_tools=set(job.custom_tools),
        encrypted_reasoning=job.encrypted_reasoning,
        leading_items=job.leading_items,
        logprobs=job.sampling.top_logprobs is not None,
        parallel_tool_calls=job.parallel_tool_calls,
        ids=ids,
        announced=job.announced,
    )


def replay_progress(
    job: GenerationJob, pieces: list[str], ids: list[str]
) -> tuple[ResponseAssembler, IdLog, list[str]]:
    """The assembler as the last run left it: the same pieces with the same ids rebuild the same events (their
    sequence numbers included), so what follows goes on from the last event sent. (assembler, ids, pieces)"""
    log = IdLog(ids)
    assembler = job_assembler(job, log)
    assembler.response.status = "in_progress"
    assembler.start()
    for piece in pieces:
        assembler.text(piece)
    return assembler, log, list(pieces)


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


async def store_with_retries(store: Callable[[], Awaitable[None]], *, budget_s: float) -> None:
    """Run a write, trying again while the database is down for up to `budget_s` (a blip keeps the generation
    going; an outage longer than the lease gives the job to reconciliation). Any other error (a constraint, a
    bug) is raised at once: the same write would fail the same way for the whole lease."""
    deadline = time.monotonic() + budget_s
    attempt = 0
    while True:
        try:
            await store()
            return
        except Exception as error:
            if not is_outage(error):
                raise
            delay = RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)]
            if time.monotonic() + delay > deadline:
                raise
            logger.warning("database write failed (%s); trying again in %.1f s", type(error).__name__, delay)
            attempt += 1
            await asyncio.sleep(delay)


async def publish_quietly(bus: EventBus, response_id: str, event: dict[str, Any]) -> None:
    """Live fan-out only: a Redis blip costs live subscribers an event (the stored ones fill the gap, the stored
    row ends the stream), never the generation."""
    try:
        await bus.publish(response_id, event)
    except Exception as error:
        REDIS_ERRORS.inc()
        logger.warning("could not publish an event of %s (%s)", response_id, error)


def terminal_event(row: ResponseRow, sequence_number: int) -> dict[str, Any]:
    """The terminal event that a stored, ended response stands for."""
    event = ResponseLifecycleEvent(
        type=f"response.{row.status}", sequence_number=sequence_number, response=response_from_row(row)
    )
    return event.model_dump(mode="json")


async def row_verdict(
    sessionmaker: async_sessionmaker[AsyncSession], job: GenerationJob, sequence_number: int
) -> dict[str, Any] | None:
    """The terminal event to publish when our final write lost: the one stored by whoever ended the response,
    or one built from its row; None while it is not ended (another worker holds it now)."""
    try:
        async with sessionmaker() as session:
            row = await repository.get_by_id(session, job.response_id)
            if row is None or row.status not in TERMINAL_STATUSES:
                return None
            if job.keep_events:
                stored = await jobs.last_event(session, job.response_id)
                if stored is not None and stored["type"] in TERMINAL_TYPES:
                    return stored
            return terminal_event(row, sequence_number)
    except Exception:
        logger.exception("could not read how %s ended", job.response_id)
        return None
