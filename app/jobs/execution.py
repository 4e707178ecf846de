"""Runs one generation job where the model is (embedded server or worker): events out, final state stored.

Every event goes to the bus (live fan-out) and, for background streams, to the database first, in small batches
(event_batches): a client is sent only what is stored. The final Response is committed before its terminal event
is published, so a client that chains the moment it sees `response.completed` finds it. A stored job is held
under a lease (lease.py) that the batches and a heartbeat renew; every write is conditional on still holding it,
so that a takeover and a late first run never both store.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import enum
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.session import Database
from app.errors import is_outage
from app.events.assembler import ResponseAssembler
from app.events.encoding import event_payload
from app.generation.job import GenerationJob
from app.generation.runner import GenerationRun, ModelRunner
from app.generation.types import Finish, GenerationFailed, ModelLoadError, ScoredPiece
from app.hosted_tools.calls import HostedCaller
from app.jobs import event_batches, repository
from app.jobs.event_batches import EventBatch, Payload
from app.jobs.final_state import (
    add_cache_diagnostics,
    final_values,
    record_unstored_end,
    row_verdict,
    turn_of,
    unstored_ending,
)
from app.jobs.lease import DEFAULT_LEASE_S, UNSTORED_RUN, Claim, JobLease, LeaseLost
from app.jobs.preemption import Preempted, until_preempted
from app.jobs.progress import IdLog, ProgressLog, job_assembler, replay_progress
from app.jobs.repository import ProgressStep
from app.jobs.steering import SteeringStop
from app.jobs.takeover import continued_job, counted
from app.jobs.telemetry import JobObserver
from app.jobs.tool_loop import LoopRun, RoundOutlet, ToolLoop
from app.jobs.writes import publish_quietly, store_with_retries
from app.lifecycle import transitions
from app.lifecycle.effects import diagnose_cache
from app.mcp.calls import McpCaller
from app.schemas.events import ResponseEvent
from app.schemas.responses import ResponseObject
from app.transport.base import EventBus

#: Charges a tenant (the job's) some tokens of its rate limit: app/limits' TenantRateLimits.charge_tokens.
TokenCharge = Callable[[str, int], Awaitable[None]]

logger = logging.getLogger(__name__)

STORE_FAILED_MESSAGE = "The server could not store this response's final state."


class Interrupted(enum.Enum):
    """Why a run stopped before it closed its response itself."""

    #: The lease is gone, or storing failed: nothing more is stored or published.
    LOST = "lost"
    #: Its process is stopping: a background job is handed over to another worker.
    HANDING_OVER = "handing over"
    #: Preempted for another tenant's job: the background job goes back to the queue, to go on later.
    HANDING_BACK = "handing back"


class JobExecution:
    def __init__(
        self,
        job: GenerationJob,
        database: Database,
        bus: EventBus,
        *,
        owner: str,
        lease_s: float = DEFAULT_LEASE_S,
        charge_tokens: TokenCharge | None = None,
        mcp: McpCaller | None = None,
        hosted: HostedCaller | None = None,
    ) -> None:
        self.job = job
        #: The request's MCP tools: the model's calls of them are made here, between rounds (None: no MCP tool).
        self.tools = ToolLoop.of(job, mcp, hosted)
        self.runner: ModelRunner | None = None
        self.generation: GenerationRun | None = None
        self.charge_tokens = charge_tokens
        self.database = database
        self.bus = bus
        self.lease_s = lease_s
        self.background = bool(job.response.get("background"))
        #: Stored jobs only: a `store: false` job has no row to hold.
        self.lease = (
            JobLease(job.response_id, owner=owner, lease_s=lease_s, keep_job=self.background) if job.store else None
        )
        self.progress = ProgressLog(IdLog([]))
        self.assembler = job_assembler(job, self.progress.ids)
        #: A takeover: the output of earlier runs, as tokens, counts as output (and continues the prompt).
        self.resumed = False
        #: A takeover's round in progress: its own prompt's length and the tokens earlier runs wrote of it (its
        #: first Finish counts them as output, not as prompt).
        self._carried: tuple[int, int] | None = None
        #: The run's Finish (or GenerationFailed) was read: the run closes its response itself.
        self._ended = False
        self._interrupted: Interrupted | None = None
        #: Steering input may stop this response (steering.py).
        self.steering = SteeringStop(job)
        #: A cancel signal came: a stop is then the cancel's, not the steering's.
        self._cancel_asked = False
        #: Set by `preempt`: the run gives its job back before its next token.
        self._preempted = asyncio.Event()
        self.observer = JobObserver(job)
        #: Kept events wait here for their write; the progress step and the lease renewal ride in it.
        self.batch = EventBatch(
            self._write,
            partial(publish_quietly, bus, job.response_id),
            flush_ms=event_batches.EVENT_FLUSH_MS,
            flush_events=event_batches.EVENT_FLUSH_EVENTS,
        )

    async def _resume(self, runner: ModelRunner, claim_progress: repository.Progress | None) -> GenerationJob:
        """The job to start: as queued, or (a takeover) continuing from the progress the last run stored."""
        self.assembler.response.status = "in_progress"
        if claim_progress is None:
            return self.job
        self.resumed = True
        replay = replay_progress(self.job, claim_progress)
        self.assembler, self.progress = replay.assembler, replay.log
        job, self._carried = await continued_job(self.job, replay, runner, self.tools)
        return job

    def _counted(self, finish: Finish) -> Finish:
        """A takeover's first Finish counts what earlier runs wrote of its round as output (takeover.counted)."""
        if self._carried is None:
            return finish
        carried, self._carried = self._carried, None
        return counted(finish, carried)

    async def _record(self) -> None:
        """Store the progress now (a tool round opened, a call ended): a takeover must know which calls were made.
        Only a background job is taken over."""
        if self.lease is None or not self.background:
            return
        if self.job.keep_events:
            await self.batch.flush()
            return
        async with self.progress.storing:
            await self._write([])

    async def _write(self, payloads: list[Payload], final: ResponseObject | None = None) -> None:
        """Store a batch (and the final state, if given) through database blips. The progress step is read before
        the first await: it is what the batch's events were made from."""
        step = self.progress.unsaved() if self.lease is not None and final is None else None
        await store_with_retries(lambda: self._store(payloads, final, step), budget_s=self.lease_s)
        self.progress.saved(step)

    async def _store(self, payloads: list[Payload], final: ResponseObject | None, step: ProgressStep | None) -> None:
        """One transaction: the events (kept ones), the progress or the final state, while the lease holds."""
        async with self.database.transaction() as session:
            if final is not None:
                await self._end_in(session, final)
            elif self.lease is not None:
                await self.lease.renew(session, step)
            if self.job.keep_events:
                await repository.insert_events(session, self.job.response_id, payloads)

    async def _end_in(self, session: AsyncSession, final: ResponseObject) -> None:
        """The response's end in `session`, through the lifecycle's ended step: a stored one's final state while
        the lease holds (LeaseLost otherwise), a `store: false` one's turn on its conversation."""
        generation_s = self.observer.generation_s()
        if self.lease is not None:
            await self.lease.finish(session, final_values(final), turn=turn_of(self.job), generation_s=generation_s)
        elif self.job.conversation_id is not None:
            await transitions.end_unstored(session, unstored_ending(self.job, final, generation_s))

    async def _emit(
        self, events: list[ResponseEvent], *, final: ResponseObject | None = None, at_once: bool = False
    ) -> None:
        """Send events: kept ones once stored (batched, unless `at_once`), the final ones after the final state
        is committed with whatever still waits, the others (not kept) straight away."""
        payloads = [event_payload(event) for event in events]
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

    async def _cancel_stored(self) -> bool:
        """A cancel stored between the claim and now (its signal may have found no generation to stop)."""
        return self.lease is not None and await self.lease.cancel_requested(self.database)

    async def _close(self, output: Finish | GenerationFailed) -> None:
        try:
            await self._end(output)
        finally:
            if isinstance(output, Finish):  # after its end is sent: the client never waits on the charge
                # A takeover's earlier runs never ended, so never charged theirs: all of the output is (_counted).
                await self._charge_output(output.output_tokens)

    async def _end(self, output: Finish | GenerationFailed) -> None:
        # The assembler before it closes anything: if the final write fails, the response fails from here.
        unfinished = copy.deepcopy(self.assembler)
        add_cache_diagnostics(self.job, self.assembler.response, output)
        if isinstance(output, GenerationFailed):
            events = self.assembler.fail(output.message)
        else:
            events = self.assembler.finish(output, completed_at=int(time.time()))
        self.observer.finished(self.assembler.response.status, output if isinstance(output, Finish) else None)
        keeps_state = self.job.store or self.job.conversation_id is not None
        if not keeps_state:  # the others end in their final write (_end_in)
            await record_unstored_end(self.database, self.job, self.assembler.response, self.observer.generation_s())
        first = self._first_unsent(events)
        try:
            await self._emit(events, final=self.assembler.response if keeps_state else None)
        except LeaseLost:
            # The row was ended (cancel, reconciler) or taken over meanwhile: say what it says, not what we made.
            self._interrupted = Interrupted.LOST
            await self._publish(await row_verdict(self.database, self.job, first))
        except Exception as error:
            self._interrupted = Interrupted.LOST
            if is_outage(error) and self.background and self.lease is not None:
                # The database stayed away past the write's budget: nothing of the end was sent, and a takeover
                # (once it is back, within lease + interval) finishes the response from the progress stored,
                # rather than a failure that a blip at the wrong moment would make.
                logger.warning(
                    "could not store the final state of %s (%s); leaving it to a takeover", self.job.response_id, error
                )
                return
            logger.exception("could not store the final state of %s", self.job.response_id)
            for event in await self._fail_unstored(unfinished):
                await self._publish(event)

    async def _charge_output(self, tokens: int) -> None:
        """The tenant's tokens per minute pay for the output (its prompt was charged when the job was queued).
        NOTE: a charge that fails is logged and dropped: the response matters more than a minute's count."""
        if self.charge_tokens is None:
            return
        try:
            await self.charge_tokens(self.job.tenant, tokens)
        except Exception as error:
            logger.warning("could not charge %d output tokens of %s: %s", tokens, self.job.response_id, error)

    async def _fail_unstored(self, unfinished: ResponseAssembler) -> list[dict[str, Any]]:
        """The final commit failed: end the response failed so that it does not hang, with the output so far
        (none of the final events went out, nor those still waiting, which go first): the items it opened end
        `incomplete`, then `error` and `response.failed`, whose response is the row GET reads."""
        unfinished.response.prompt_cache_diagnostics = diagnose_cache(self.job.cache_comparison, None)
        events = unfinished.fail(STORE_FAILED_MESSAGE)
        failed = unfinished.response
        first = self._first_unsent(events)
        payloads = [*self.batch.pending, *(event.model_dump(mode="json") for event in events)]

        async def store() -> None:
            async with self.database.transaction() as session:
                await self._end_in(session, failed)
                if self.job.keep_events:
                    await repository.insert_events(session, self.job.response_id, payloads)

        try:
            await store_with_retries(store, budget_s=self.lease_s)
        except LeaseLost:
            verdict = await row_verdict(self.database, self.job, first)
            return [] if verdict is None else [verdict]
        except Exception:
            # The database is gone for longer than a lease: reconciliation ends (or retries) it once it is back.
            logger.exception("could not fail %s either; leaving it to reconciliation", self.job.response_id)
            return []
        return payloads

    async def _publish(self, event: dict[str, Any] | None) -> None:
        if event is not None:
            await publish_quietly(self.bus, self.job.response_id, event)

    async def _hand_over(self, *, back: bool = False) -> None:
        """Stopping (shutdown): store the events still waiting with the progress they were made from, and give
        the lease up at once so that another worker takes the job over from there (`back`: preempted, the job
        goes back to the queue instead, `queued`). If that write fails, the lease is given up alone: the
        takeover makes those events again (none was sent)."""
        assert self.lease is not None
        lease = self.lease
        give_up = lease.hand_back if back else lease.hand_over
        await self.batch.stop()
        payloads = list(self.batch.pending) if self.batch.failure is None else []
        progress = self.progress.unsaved() if payloads or not self.job.keep_events else None

        async def release(payloads: list[Payload], progress: ProgressStep | None) -> None:
            async with self.database.transaction() as session:
                if await give_up(session, progress) and payloads:
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

    async def _claim(self) -> Claim | None:
        """Take the job under its lease; None when it is not ours (cancelled, ended, or another worker holds it)."""
        if self.lease is None:
            return UNSTORED_RUN
        async with self.database.transaction() as session:
            return await self.lease.claim(session, keeps_events=self.job.keep_events)

    async def run(self, runner: ModelRunner) -> None:
        claim = await self._claim()
        if claim is None:
            logger.info("response %s is not ours to generate (ended, or held by another worker)", self.job.response_id)
            return
        try:
            job = await self._resume(runner, claim.progress)
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
                    [event for event in opening if event.sequence_number >= claim.next_stored], at_once=True
                )
        except LeaseLost:
            return
        if self.tools is not None and self.tools.setup.failure is not None:
            # A server's tools could not be listed: its mcp_list_tools item says why, and the response fails.
            self._ended = True
            await self._close(GenerationFailed(self.tools.setup.failure))
            return
        try:
            if self.tools is not None:
                await self.tools.close_stopped(self._outlet())
        except LeaseLost:
            return
        if self.tools is not None and self.tools.ends_after(self.assembler):  # an earlier run's last round, then died
            self._ended = True
            await self._close(self.tools.total(Finish("stop", 0, 0, 0)))
            return
        self.runner = runner
        # (The loop's own job stays the round's, as _resume left it: a takeover's text so far is not its prompt.)
        generation: GenerationRun = (
            runner.start(job) if self.tools is None else LoopRun(self.tools.start(runner, job, resumed=self.resumed))
        )
        self.generation = generation
        self.observer.generation_started(resumed=self.resumed)
        heartbeat: asyncio.Task[None] | None = None
        if self.lease is not None:
            # A background job whose events are not kept stores its progress with the beats, for a takeover.
            beats_progress = self.progress if self.background and not self.job.keep_events else None
            heartbeat = asyncio.create_task(self.lease.heartbeat(self.database, generation, beats_progress))
        try:
            # A cancel stored before the claim, or signalled before the generation was there to stop (one stored
            # since whose signal was lost is read by the heartbeat's first check, beside the prefill).
            if claim.cancel_requested or self._cancel_asked:
                self._cancel_asked = True
                generation.cancel()
            await self._relay(generation)
        except LeaseLost:
            self._interrupted = Interrupted.LOST
            logger.warning("lost the lease of %s: another worker has it, or it ended", self.job.response_id)
        except Preempted:
            self._interrupted = Interrupted.HANDING_BACK
            logger.info("preempted %s: it goes back to the queue", self.job.response_id)
        except asyncio.CancelledError:
            # A worker shutting down hands a background job over rather than ending it.
            if self.background and self.lease is not None:
                self._interrupted = Interrupted.HANDING_OVER
            raise
        except Exception:
            self._interrupted = Interrupted.LOST
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
                    await self._relay(generation, silent=self._interrupted is not None)
                    if self._interrupted in (Interrupted.HANDING_OVER, Interrupted.HANDING_BACK):
                        await self._hand_over(back=self._interrupted is Interrupted.HANDING_BACK)
            with anyio.CancelScope(shield=True):
                await self.batch.stop()  # the final write, the hand-over or a failure left nothing for it

    def cancel(self) -> None:
        """A cancel signal: a tool loop stops between rounds too (the model's run alone is the runner's)."""
        self._cancel_asked = True
        if isinstance(self.generation, LoopRun):
            self.generation.cancel()

    def steer(self) -> None:
        """A steer signal: the generation stops at the next safe boundary, and the response ends `incomplete`
        (reason `steered`); one that completes first is not cut."""
        self.steering.asked = True
        if self.generation is not None:
            self._stop_for_steering(self.generation)

    def _stop_for_steering(self, generation: GenerationRun) -> None:
        stored = self.lease is not None and self.lease.steer_requested
        self.steering.check(generation, self.assembler, stored=stored)

    async def _steered(self, finish: Finish) -> Finish:
        """A stop this run made for steering input ends `steered`, unless a cancel came too (stored or signalled)."""
        if not self.steering.made(finish) or self._cancel_asked or await self._cancel_stored():
            return finish
        return self.steering.steered(finish)

    def preempt(self) -> bool:
        """Give the job back to the queue before its next token, its progress stored (another tenant's job needs
        the place): whether it will. Only a stored background job can (a later run takes it over, as after a
        worker's stop), without tools (never inside a tool call) or logprobs (those of the text so far are not
        stored), and only while it generates."""
        if (
            self.lease is None
            or not self.background
            or self.tools is not None
            or self.job.sampling.top_logprobs is not None
            or self.generation is None
            or self._ended
            or self._interrupted is not None
            or self._preempted.is_set()
        ):
            return False
        self._preempted.set()
        return True

    async def _relay(self, generation: GenerationRun, *, silent: bool = False) -> None:
        while True:
            outputs: AsyncIterator[Any] = generation.outputs()
            if not silent and self.tools is None and self.background and self.lease is not None:
                outputs = until_preempted(outputs, self._preempted)  # it may be preempted between two tokens
            async for output in outputs:
                if isinstance(output, str | ScoredPiece):
                    if silent:
                        continue
                    self.observer.output()
                    self.progress.pieces.append(output if isinstance(output, str) else output.text)
                    await self._emit(self.assembler.text(output))
                    self._stop_for_steering(generation)
                    continue
                if isinstance(output, Finish) and not silent:
                    output = self._counted(output)
                if isinstance(output, Finish) and isinstance(generation, LoopRun) and not silent:
                    ended = await self._tool_round(generation, output)
                    if ended is None:
                        break  # the next round's run is in `generation`
                    output = ended
                if isinstance(output, Finish) and not silent:
                    output = await self._steered(output)
                self._ended = True  # read once: a close that raises must not wait for it again
                if self.lease is not None and self.lease.lapsed:
                    # Its end is the reconciler's (or a takeover's) to write once the database is back.
                    self._interrupted = Interrupted.LOST
                elif not silent:
                    await self._close(output)
                return
            else:
                return

    async def _tool_round(self, generation: LoopRun, finish: Finish) -> Finish | GenerationFailed | None:
        assert self.tools is not None and self.runner is not None
        return await self.tools.round(generation, finish, self.runner, self._outlet())

    def _outlet(self) -> RoundOutlet:
        return RoundOutlet(self.assembler, self.progress, self._emit, self._record)
