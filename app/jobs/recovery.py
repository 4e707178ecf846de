"""Responses whose generation stopped: taken over by another run, or ended with a terminal event equal to GET.

Reconciliation needs no live worker: it reads the database (one page of expired leases, one page of queued jobs
a round), so an API node can run it as well as a worker.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.config import Settings
from app.db.models import ResponseRow
from app.db.session import Database
from app.events.terminal import terminal_event
from app.generation.job import GenerationJob
from app.generation.types import Finish
from app.jobs import repository as jobs
from app.jobs.final_state import final_values, turn_of
from app.jobs.progress import replay_progress
from app.jobs.writes import publish_quietly
from app.lifecycle import transitions
from app.lifecycle.effects import TurnEnd, diagnose_cache, require_registered
from app.schemas.events import ErrorEvent
from app.transport.base import EventBus, GenerationQueue

logger = logging.getLogger(__name__)

LOST_GENERATION_ERROR = {"code": "server_error", "message": "The server stopped before this response finished."}
#: Expired leases, and queued jobs, looked at per round.
RECONCILE_PAGE = 100
#: A queued response older than this whose job the queue no longer has is enqueued again.
LOST_JOB_AGE_S = 10


def unserved_error(model: str) -> dict[str, Any]:
    return {
        "code": "server_error",
        "message": f"No worker serving model '{model}' was alive to generate this response; try again later.",
    }


def gave_up_error(attempts: int) -> dict[str, Any]:
    return {
        "code": "server_error",
        "message": f"The server stopped {attempts} times while generating this response; it was not retried again.",
    }


@dataclass(frozen=True, slots=True)
class RecoveryPolicy:
    lease_s: float
    max_attempts: int

    @classmethod
    def from_settings(cls, settings: Settings) -> RecoveryPolicy:
        return cls(lease_s=settings.lease_s, max_attempts=settings.max_attempts)


@dataclass(frozen=True, slots=True)
class RoundReport:
    taken_over: int = 0
    ended: int = 0
    requeued: int = 0


def _ending(
    row: ResponseRow, progress: jobs.Progress | None, status: str, error: dict[str, Any] | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The columns that end the response as `status`, and the events before its terminal one: with stored
    progress, the output so far (the last run's assembler rebuilt from it) and the `done` events of the items it
    had opened, so that a stream reader sees each item end (and `error` before `response.failed`)."""
    job = None if row.job is None else GenerationJob.from_payload(row.job)
    # Its prompt-cache diagnostics with no usage (the job's comparison: none known once a claim dropped the job).
    diagnostics = None if job is None else diagnose_cache(job.cache_comparison, None)
    values: dict[str, Any] = {"status": status, "error": error, "prompt_cache_diagnostics": diagnostics}
    if job is None or progress is None or not progress.pieces:
        # Nothing said, nothing open; a failure still says why before `response.failed`.
        said = [] if error is None else [ErrorEvent(sequence_number=0, code=error["code"], message=error["message"])]
        return values, [event.model_dump(mode="json") for event in said]
    replay = replay_progress(job, progress)
    assembler = replay.assembler
    assembler.response.prompt_cache_diagnostics = diagnostics
    if status == "failed":
        assert error is not None
        events = assembler.fail(error["message"], code=error["code"])
    else:
        # NOTE: a piece is a token but for split UTF-8, as the reasoning count does; the tokenizer is not here.
        finish = Finish("cancelled", len(job.prompt_tokens), 0, replay.log.text_pieces())
        events = assembler.finish(finish, completed_at=int(time.time()))
    values.update(final_values(assembler.response))
    return values, [event.model_dump(mode="json") for event in events[:-1]]


async def end_response(
    database: Database,
    bus: EventBus | None,
    response_id: str,
    *,
    status: str,
    error: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """End a response that nobody holds (queued, or its lease expired) as `status`, keeping the output generated
    so far: with stored events (closing what was open, then the terminal one) when its events are kept, so a
    replay ends, published for live streams. The terminal event, or None when someone holds it or it has ended."""
    async with database.transaction() as session:
        row = await jobs.lock_unheld(session, response_id)
        if row is None:  # held (its worker ends it) or ended: nothing to rebuild
            return None
        values, closing = _ending(row, await jobs.progress_of(session, response_id), status, error)
        if not await transitions.end_unheld(session, response_id, values=values, turn=_turn(row)):
            return None
        row = await jobs.reload(session, response_id)
        if row is None:
            return None
        keeps_events = row.background and row.stream
        sequence = await jobs.next_sequence_number(session, response_id) if keeps_events else 0
        # Numbered after what was stored (the rebuilt events are numbered so too when the progress was stored
        # with them, as a kept stream's is).
        events = [{**event, "sequence_number": sequence + index} for index, event in enumerate(closing)]
        events.append(terminal_event(row, sequence + len(closing)))
        if keeps_events:
            await jobs.insert_events(session, response_id, events)
    if bus is not None and keeps_events:
        # A live relay of an unkept stream has its own sequence numbers: it ends from the stored row instead.
        for event in events:
            await publish_quietly(bus, response_id, event)
    return events[-1]


def _turn(row: ResponseRow) -> TurnEnd | None:
    """The conversation turn a response nobody holds ends, as its stored job says; None when it runs on none, or
    when its claim dropped its job (a foreground one): the conversation's claim names it then."""
    return None if row.job is None else turn_of(GenerationJob.from_payload(row.job))


def _resumable(row: ResponseRow, progress: jobs.Progress | None) -> bool:
    if row.job is None or not row.background:
        return False
    if progress is None or not progress.pieces:
        return True
    # NOTE: a grammar's state is carried over (the takeover's sampler accepts the text so far); the logprobs of
    # what was said are not stored, so a logprobs job goes on only if it had said nothing.
    return row.job.get("sampling", {}).get("top_logprobs") is None


@dataclass
class Reconciler:
    """One round at a time: expired leases are taken over (background jobs with tries left) or ended; queued
    jobs that the queue lost are enqueued again, those waiting where no worker will take them are moved, and
    foreground ones no worker serves are ended. Keeps its place in the queued jobs between rounds."""

    database: Database
    queue: GenerationQueue
    policy: RecoveryPolicy
    _cursor: tuple[datetime, str] | None = field(default=None)

    def __post_init__(self) -> None:
        require_registered()  # the ends it makes run the effects registered at start-up: none may be missing

    async def run_round(self) -> RoundReport:
        # Every lease and age is judged by the database's clock (app/db/clock.py): a reconciler on a host whose
        # clock runs fast takes over no live lease.
        async with self.database.read() as session:
            expired = await jobs.expired_leases(session, limit=RECONCILE_PAGE)
        taken_over = ended = 0
        for row in expired:
            if await self._settle(row):
                taken_over += 1
            else:
                ended += 1
        requeued = await self._requeue_lost() + await self.queue.release_stranded()
        ended += await self._end_unserved()
        if taken_over or ended or requeued:
            logger.warning("reconciled: %d taken over, %d ended, %d re-enqueued", taken_over, ended, requeued)
        return RoundReport(taken_over, ended, requeued)

    async def _settle(self, row: ResponseRow) -> bool:
        """True when the job goes to another run; False when the response was ended (or is no longer ours)."""
        bus = self.queue.bus
        if row.cancel_requested_at is not None:
            await end_response(self.database, bus, row.id, status="cancelled")
            return False
        async with self.database.read() as session:
            resumable = _resumable(row, await jobs.progress_of(session, row.id))
        # A preempted run ended well (it handed its job back): only the runs that were lost count.
        lost_runs = row.attempts - row.preemptions
        if resumable and lost_runs < self.policy.max_attempts:
            assert row.job is not None
            async with self.database.transaction() as session:
                released = await transitions.release_for_takeover(session, row.id)
            if released:
                logger.warning("response %s lost its worker %s: enqueued again", row.id, row.lease_owner)
                # If this fails (the queue is down), the queued row is found by a later round's _requeue_lost.
                await self.queue.requeue(GenerationJob.from_payload(row.job), row.lease_owner)
            return released
        error = gave_up_error(lost_runs) if resumable else LOST_GENERATION_ERROR
        await end_response(self.database, bus, row.id, status="failed", error=error)
        return False

    async def _requeue_lost(self) -> int:
        async with self.database.read() as session:
            page = await jobs.queued_page(
                session, older_than_s=LOST_JOB_AGE_S, after=self._cursor, limit=RECONCILE_PAGE
            )
        self._cursor = (page[-1][1], page[-1][0]) if len(page) == RECONCILE_PAGE else None
        requeued = 0
        for response_id, _ in page:
            if await self.queue.job_is_waiting(response_id):
                continue
            async with self.database.read() as session:
                payload = await jobs.get_job(session, response_id)
            if payload is not None:
                logger.warning("re-enqueueing %s, which the queue lost", response_id)
                await self.queue.requeue(GenerationJob.from_payload(payload), None)
                requeued += 1
        return requeued

    async def _end_unserved(self) -> int:
        """Foreground responses queued for longer than a lease while no worker serves their model (the one there
        was died, or drained, after the create was taken) end `failed` rather than hold their clients without
        bound; background ones wait for a worker, as their clients do not."""
        async with self.database.read() as session:
            waiting = await jobs.queued_foreground(session, older_than_s=self.policy.lease_s, limit=RECONCILE_PAGE)
        served: dict[str, bool] = {}
        ended = 0
        for response_id, model in waiting:
            if model not in served:
                served[model] = await self.queue.live_workers(model) > 0
            if served[model]:
                continue
            logger.warning("ending %s: no worker serves %s", response_id, model)
            if await end_response(
                self.database, self.queue.bus, response_id, status="failed", error=unserved_error(model)
            ):
                ended += 1
        return ended


async def release_unfinished_responses(database: Database) -> int:
    """Embedded mode at start-up: the generations a previous run left in progress are lost with it; their leases
    end now, for reconciliation to take each over (a background job with tries left) or end it as it ends any
    lost run (the output so far kept, a terminal event stored, the job dropped). How many leases there were. (The
    conversations its `store: false` turns held are the start-up's to free: app/main.py.)"""
    async with database.transaction() as session:
        return await jobs.expire_leases(session)
