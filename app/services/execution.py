"""Runs one generation job where the model is (embedded server or worker): events out, final state stored.

Every event goes to the bus (live fan-out) and, for background streams, to the database first, in small batches
(event_batches): a client is sent only what is stored. The final Response is committed before its terminal event
is published, so a client that chains the moment it sees `response.completed` finds it. A stored job is held
under a lease (owner + expiry) that a heartbeat renews; every write is conditional on still holding it, so that a
takeover and a late first run never both store.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.base import utc_now
from app.db.repositories import jobs
from app.db.repositories import responses as repository
from app.generation.types import Finish, GenerationFailed, ModelLoadError, ScoredPiece
from app.observability.generation import JobObserver
from app.queue.base import EventBus, GenerationJob, GenerationRun, ModelRunner
from app.schemas.events import ResponseEvent
from app.schemas.responses import ResponseObject
from app.services import event_batches
from app.services.assembly import ResponseAssembler
from app.services.event_batches import EventBatch, Payload
from app.services.finished_items import record_final_items
from app.services.job_progress import (
    IdLog,
    LeaseLost,
    final_values,
    job_assembler,
    publish_quietly,
    replay_progress,
    row_verdict,
    store_with_retries,
)

logger = logging.getLogger(__name__)

DEFAULT_LEASE_S = 15.0
STORE_FAILED_MESSAGE = "The server could not store this response's final state."


class JobExecution:
    def __init__(
        self,
        job: GenerationJob,
        sessionmaker: async_sessionmaker[AsyncSession],
        bus: EventBus,
        *,
        owner: str,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> None:
        self.job = job
        self.sessionmaker = sessionmaker
        self.bus = bus
        self.owner = owner
        self.lease_s = lease_s
        self.background = bool(job.response.get("background"))
        self.ids = IdLog([])
        self.assembler = job_assembler(job, self.ids)
        #: The text pieces given to the assembler, in order: with `ids`, what a takeover replays.
        self.pieces: list[str] = []
        self.progress: jobs.Progress | None = None
        #: How many of `pieces` and of the ids are stored, in how many progress rows: each store appends only
        #: what is new (a rewrite on every event would grow with the square of the length).
        self._stored_pieces = self._stored_ids = self._stored_rows = 0
        self.cancel_requested = False
        self.resumed = False
        #: The first sequence number not stored yet (kept events): a takeover of a run that died before saying
        #: anything stores only the opening events that run did not.
        self._next_stored = 0
        self.prior_tokens = 0
        self._ended = False  # the run's Finish (or GenerationFailed) was read
        self._lost = False  # the lease is gone, or storing failed: nothing more is stored or published
        self._handing_over = False
        self.observer = JobObserver(job)
        #: Kept events wait here for their write; the progress step and the lease renewal ride in it.
        self.batch = EventBatch(
            self._write,
            partial(publish_quietly, bus, job.response_id),
            flush_ms=event_batches.EVENT_FLUSH_MS,
            flush_events=event_batches.EVENT_FLUSH_EVENTS,
        )

    def _lease_until(self) -> datetime:
        return utc_now() + timedelta(seconds=self.lease_s)

    def _progress_step(self) -> jobs.ProgressStep | None:
        """What is new since the last stored step; None when nothing is."""
        pieces, ids = self.pieces[self._stored_pieces :], self.ids.recorded[self._stored_ids :]
        if not pieces and not ids:
            return None
        return jobs.ProgressStep(position=self._stored_rows, pieces=pieces, ids=ids)

    def _step_stored(self, step: jobs.ProgressStep | None) -> None:
        if step is not None:
            self._stored_pieces += len(step.pieces)
            self._stored_ids += len(step.ids)
            self._stored_rows += 1

    async def _claim(self) -> bool:
        """Take the job under a lease: False when it was cancelled, has ended, or another worker holds it."""
        if not self.job.store:
            return True
        async with self.sessionmaker() as session, session.begin():
            row = await jobs.claim(
                session,
                self.job.response_id,
                owner=self.owner,
                now=utc_now(),
                lease_until=self._lease_until(),
                keep_job=self.background,
            )
            if row is None:
                return False
            self.progress = await jobs.progress_of(session, row.id)
            if row.attempts > 1 and self.progress is None and self.job.keep_events:
                self._next_stored = await jobs.next_sequence_number(session, row.id)
            self.cancel_requested = row.cancel_requested_at is not None
            if row.attempts > 1:
                logger.warning("taking over response %s (attempt %d)", row.id, row.attempts)
        return True

    async def _resume(self, runner: ModelRunner) -> GenerationJob:
        """The job to start: as queued, or (a takeover) continuing from the progress the last run stored."""
        self.assembler.response.status = "in_progress"
        if self.progress is None:
            return self.job
        self.resumed = True
        self.assembler, self.ids, self.pieces = replay_progress(self.job, self.progress.pieces, self.progress.ids)
        self._stored_pieces, self._stored_ids = len(self.progress.pieces), len(self.progress.ids)
        self._stored_rows = self.progress.rows
        written = await runner.tokenize(self.job.model, "".join(self.pieces)) if self.pieces else []
        self.prior_tokens = len(written)
        cap = self.job.sampling.max_output_tokens
        sampling = replace(
            self.job.sampling,
            max_output_tokens=None if cap is None else max(cap - len(written), 0),
            resumed_output_tokens=len(written),
        )
        return replace(self.job, prompt_tokens=[*self.job.prompt_tokens, *written], sampling=sampling)

    async def _write(self, payloads: list[Payload], final: ResponseObject | None = None) -> None:
        """Store a batch (and the final state, if given) through database blips. The progress step is read before
        the first await: it is what the batch's events were made from."""
        step = self._progress_step() if self.job.store and final is None else None
        await store_with_retries(lambda: self._store(payloads, final, step), budget_s=self.lease_s)
        self._step_stored(step)

    async def _store(
        self, payloads: list[Payload], final: ResponseObject | None, step: jobs.ProgressStep | None
    ) -> None:
        """One transaction: the events (kept ones), the progress or the final state, while the lease holds."""
        async with self.sessionmaker() as session, session.begin():
            if self.job.store and final is not None:
                values = final_values(final)
                if not await jobs.finish_held(session, self.job.response_id, owner=self.owner, values=values):
                    raise LeaseLost(self.job.response_id)
            elif self.job.store:
                held, _ = await jobs.renew(
                    session,
                    self.job.response_id,
                    owner=self.owner,
                    now=utc_now(),
                    lease_until=self._lease_until(),
                    progress=step,
                )
                if not held:
                    raise LeaseLost(self.job.response_id)
            if self.job.keep_events:
                await repository.insert_events(session, self.job.response_id, payloads)
            if final is not None:
                await record_final_items(session, self.job, final)

    async def _emit(
        self, events: list[ResponseEvent], *, final: ResponseObject | None = None, at_once: bool = False
    ) -> None:
        """Send events: kept ones once stored (batched, unless `at_once`), the final ones after the final state
        is committed with whatever still waits, the others (not kept) straight away."""
        payloads = [event.model_dump(mode="json") for event in events]
        if final is not None:
            await self.batch.flush(payloads, write=partial(self._write, final=final))
        elif not self.job.keep_events:
            for payload in payloads:
                await publish_quietly(self.bus, self.job.response_id, payload)
        elif at_once:
            await self.batch.flush(payloads)
        else:
            await self.batch.add(payloads)

    def _first_unsent(self, events: list[ResponseEvent]) -> int:
        """The sequence number after the last event sent: the first waiting one, else the first of `events`."""
        return self.batch.pending[0]["sequence_number"] if self.batch.pending else events[0].sequence_number

    async def _heartbeat(self, generation: GenerationRun) -> None:
        """Renews the lease until cancelled; a failed renewal is retried next beat, never the end of it. A lost
        lease or a stored cancel request stops the generation."""
        while True:
            await asyncio.sleep(self.lease_s / 3)
            # A background job whose events are not kept stores its progress here, for a takeover.
            progress = self._progress_step() if self.background and not self.job.keep_events else None
            try:
                async with self.sessionmaker() as session, session.begin():
                    held, cancel = await jobs.renew(
                        session,
                        self.job.response_id,
                        owner=self.owner,
                        now=utc_now(),
                        lease_until=self._lease_until(),
                        progress=progress,
                    )
            except Exception as error:
                logger.warning("could not renew the lease of %s (%s); trying again", self.job.response_id, error)
                continue
            if held:
                self._step_stored(progress)
            if not held:
                logger.warning(
                    "lost the lease of %s: stopping its generation (%s)", self.job.response_id, await self._holder()
                )
                generation.cancel()
                return
            if cancel:
                generation.cancel()

    async def _holder(self) -> str:
        """Who has the response now, for the log."""
        with contextlib.suppress(Exception):
            async with self.sessionmaker() as session:
                row = await repository.get_by_id(session, self.job.response_id)
                if row is not None:
                    return f"{row.status}, lease {row.lease_owner} until {row.lease_expires_at}, try {row.attempts}"
        return "unknown"

    async def _cancel_stored(self) -> bool:
        """A cancel stored between the claim and now (its signal may have found no generation to stop)."""
        if not self.job.store:
            return False
        with contextlib.suppress(Exception):
            async with self.sessionmaker() as session, session.begin():
                _, cancel = await jobs.renew(
                    session, self.job.response_id, owner=self.owner, now=utc_now(), lease_until=None
                )
                return cancel
        return False

    async def _close(self, output: Finish | GenerationFailed) -> None:
        # The assembler before it closes anything: if the final write fails, the response fails from here.
        unfinished = copy.deepcopy(self.assembler)
        if isinstance(output, GenerationFailed):
            events = self.assembler.fail(output.message)
        else:
            if self.resumed:  # usage counts the first run's tokens as output, not as prompt
                prompt = len(self.job.prompt_tokens)
                output = Finish(
                    output.reason, prompt, min(output.cached_tokens, prompt), self.prior_tokens + output.output_tokens
                )
            events = self.assembler.finish(output, completed_at=int(time.time()))
        self.observer.finished(self.assembler.response.status, output if isinstance(output, Finish) else None)
        keeps_state = self.job.store or self.job.conversation_id is not None
        first = self._first_unsent(events)
        try:
            await self._emit(events, final=self.assembler.response if keeps_state else None)
        except LeaseLost:
            # The row was ended (cancel, reconciler) or taken over meanwhile: say what it says, not what we made.
            self._lost = True
            await self._publish(await row_verdict(self.sessionmaker, self.job, first))
        except Exception:
            logger.exception("could not store the final state of %s", self.job.response_id)
            self._lost = True
            for event in await self._fail_unstored(unfinished):
                await self._publish(event)

    async def _fail_unstored(self, unfinished: ResponseAssembler) -> list[dict[str, Any]]:
        """The final commit failed: end the response failed so that it does not hang, with the output so far
        (none of the final events went out, nor those still waiting, which go first): the items it opened end
        `incomplete`, then `error` and `response.failed`, whose response is the row GET reads."""
        events = unfinished.fail(STORE_FAILED_MESSAGE)
        failed = unfinished.response
        first = self._first_unsent(events)
        payloads = [*self.batch.pending, *(event.model_dump(mode="json") for event in events)]

        async def store() -> None:
            async with self.sessionmaker() as session, session.begin():
                if self.job.store and not await jobs.finish_held(
                    session, self.job.response_id, owner=self.owner, values=final_values(failed)
                ):
                    raise LeaseLost(self.job.response_id)
                if self.job.keep_events:
                    await repository.insert_events(session, self.job.response_id, payloads)

        try:
            await store_with_retries(store, budget_s=self.lease_s)
        except LeaseLost:
            verdict = await row_verdict(self.sessionmaker, self.job, first)
            return [] if verdict is None else [verdict]
        except Exception:
            # The database is gone for longer than a lease: reconciliation ends (or retries) it once it is back.
            logger.exception("could not fail %s either; leaving it to reconciliation", self.job.response_id)
            return []
        return payloads

    async def _publish(self, event: dict[str, Any] | None) -> None:
        if event is not None:
            await publish_quietly(self.bus, self.job.response_id, event)

    async def _hand_over(self) -> None:
        """Stopping (shutdown): store the events still waiting with the progress they were made from, and give
        the lease up at once so that another worker takes the job over from there. If that write fails, the
        lease is given up alone: the takeover makes those events again (none was sent)."""
        await self.batch.stop()
        payloads = list(self.batch.pending) if self.batch.failure is None else []
        progress = self._progress_step() if payloads or not self.job.keep_events else None

        async def release(payloads: list[Payload], progress: jobs.ProgressStep | None) -> None:
            async with self.sessionmaker() as session, session.begin():
                held, _ = await jobs.renew(
                    session,
                    self.job.response_id,
                    owner=self.owner,
                    now=utc_now(),
                    lease_until=utc_now(),
                    progress=progress,
                )
                if held and payloads:
                    await repository.insert_events(session, self.job.response_id, payloads)

        try:
            await release(payloads, progress)
        except Exception:
            with contextlib.suppress(Exception):
                await release([], None)
            return
        for payload in payloads:
            await self._publish(payload)

    async def _flush_quietly(self) -> None:
        """The generation broke: what it said before is stored and sent, as it would have been unbatched."""
        if self.job.keep_events and self.batch.failure is None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await self.batch.flush()

    async def run(self, runner: ModelRunner) -> None:
        if not await self._claim():
            logger.info("response %s is not ours to generate (ended, or held by another worker)", self.job.response_id)
            return
        try:
            job = await self._resume(runner)
        except ModelLoadError as error:
            # A takeover tokenises what was written with the job's model: one that will not load here fails
            # the response, as it does a fresh job (raised, it would leave the response to wait for its lease).
            self._ended = True
            await self._close(GenerationFailed(str(error)))
            return
        try:
            if not self.resumed:
                opening = self.assembler.start()
                await self._emit(
                    [event for event in opening if event.sequence_number >= self._next_stored], at_once=True
                )
        except LeaseLost:
            return
        generation = runner.start(job)
        self.observer.generation_started(resumed=self.resumed)
        heartbeat = asyncio.create_task(self._heartbeat(generation)) if self.job.store else None
        try:
            if self.cancel_requested or await self._cancel_stored():
                generation.cancel()
            await self._relay(generation)
        except LeaseLost:
            self._lost = True
            logger.warning("lost the lease of %s: another worker has it, or it ended", self.job.response_id)
        except asyncio.CancelledError:
            # A worker shutting down hands a background job over rather than ending it.
            self._handing_over = self.background and self.job.store
            raise
        except Exception:
            self._lost = True
            logger.exception("generation of %s stopped; its lease will expire and be reconciled", job.response_id)
            await self._flush_quietly()
        finally:
            if heartbeat is not None:
                heartbeat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat
            if not self._ended:
                generation.cancel()
                with anyio.CancelScope(shield=True):
                    # Stopped from outside (shutdown, a lost connection): stop the model and store what it made,
                    # unless the job goes to another worker or is no longer ours.
                    silent = self._lost or self._handing_over
                    await self._relay(generation, silent=silent)
                    if self._handing_over:
                        await self._hand_over()
            with anyio.CancelScope(shield=True):
                await self.batch.stop()  # the final write, the hand-over or a failure left nothing for it

    async def _relay(self, generation: GenerationRun, *, silent: bool = False) -> None:
        outputs: AsyncIterator[Any] = generation.outputs()
        async for output in outputs:
            if isinstance(output, str | ScoredPiece):
                if silent:
                    continue
                self.observer.output()
                self.pieces.append(output if isinstance(output, str) else output.text)
                await self._emit(self.assembler.text(output))
            else:
                self._ended = True  # read once: a close that raises must not wait for it again
                if not silent:
                    await self._close(output)
                return


async def execute_job(
    job: GenerationJob,
    runner: ModelRunner,
    sessionmaker: async_sessionmaker[AsyncSession],
    bus: EventBus,
    *,
    owner: str,
    lease_s: float = DEFAULT_LEASE_S,
) -> None:
    execution = JobExecution(job, sessionmaker, bus, owner=owner, lease_s=lease_s)
    with execution.observer.running():
        await execution.run(runner)
