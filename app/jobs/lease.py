"""Who owns a stored job, decided in one place: a run claims it under a lease (owner + expiry), renews it while it
generates (with each batch it stores, and on a heartbeat), hands it over when its process stops, and finishes it.
Every one of these is a conditional write on the response's row, made in the caller's transaction beside what it
stores, and fenced by the claim's attempt (lifecycle's Holder), so that a takeover and a late first run never both
store, even where both runs are in one process. Its expiry is written and judged by the database's clock
(app/db/clock.py): a host whose clock runs fast or slow neither takes a live lease nor writes one already spent.
This process's own clock only times its lease's length (time.monotonic, which no clock step moves)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.session import Database
from app.generation.runner import GenerationRun
from app.jobs import repository
from app.jobs.progress import ProgressLog
from app.jobs.repository import Progress, ProgressStep
from app.lifecycle import transitions
from app.lifecycle.effects import TurnEnd
from app.lifecycle.transitions import Holder

logger = logging.getLogger(__name__)

DEFAULT_LEASE_S = 15.0


class LeaseLost(Exception):
    """The job's lease is no longer ours: another worker took it over, or the response ended meanwhile."""


@dataclass(frozen=True, slots=True)
class Claim:
    """What a claim found of the job's earlier runs."""

    #: The progress they stored (a takeover goes on from it); None for a first run, or one that stored none.
    progress: Progress | None
    #: The first sequence number not stored yet: a takeover of a run that died before saying anything stores
    #: only the opening events that run did not (0 otherwise).
    next_stored: int
    #: A cancel was stored before this run began.
    cancel_requested: bool


#: What the run of a `store: false` job starts from: it has no row, no earlier run and no lease.
UNSTORED_RUN = Claim(progress=None, next_stored=0, cancel_requested=False)


class JobLease:
    """One run's lease on one stored response's job."""

    def __init__(self, response_id: str, *, owner: str, lease_s: float = DEFAULT_LEASE_S, keep_job: bool) -> None:
        self.response_id = response_id
        self.owner = owner
        self.lease_s = lease_s
        #: Keep the stored job after the claim, for a later takeover (background jobs).
        self.keep_job = keep_job
        #: Set by the claim: every later write is fenced by it (lifecycle's Holder).
        self._claimed_by: Holder | None = None
        #: When (time.monotonic) the lease last written runs out at the latest, by this process's clock.
        self._runs_out_at = time.monotonic() + lease_s
        #: The heartbeat could not renew the lease before it ran out: the job is no longer this run's to end.
        self.lapsed = False
        #: A steer is stored for the response (read by the claim and each renewal): the run stops at its next
        #: safe boundary (JobExecution), whether or not the signal reached it.
        self.steer_requested = False

    @property
    def holder(self) -> Holder:
        assert self._claimed_by is not None, "the lease is used before its claim"
        return self._claimed_by

    async def claim(self, session: AsyncSession, *, keeps_events: bool) -> Claim | None:
        """Take the job (queued, or in progress with an expired lease): None when it was cancelled, has ended, or
        another worker holds it."""
        self._runs_out_at = time.monotonic() + self.lease_s  # read before the write: never later than its expiry
        row = await transitions.claim(
            session,
            self.response_id,
            owner=self.owner,
            lease_s=self.lease_s,
            keep_job=self.keep_job,
        )
        if row is None:
            return None
        self._claimed_by = Holder(self.owner, row.attempts)
        # A first run has no earlier one whose progress it could go on from (nobody held the job before it).
        progress = await repository.progress_of(session, row.id) if row.attempts > 1 else None
        next_stored = 0
        if row.attempts > 1 and progress is None and keeps_events:
            next_stored = await repository.next_sequence_number(session, row.id)
        if row.attempts > 1:
            logger.warning(
                "taking over response %s (attempt %d: its last run stopped, or was preempted)", row.id, row.attempts
            )
        self.steer_requested = row.steer_requested_at is not None
        return Claim(progress, next_stored, cancel_requested=row.cancel_requested_at is not None)

    async def renew(self, session: AsyncSession, progress: ProgressStep | None = None) -> bool:
        """Extend the lease, appending `progress`; whether a cancel was requested. LeaseLost when it is not ours."""
        held, cancel, steer = await repository.renew(
            session, self.response_id, holder=self.holder, lease_s=self.lease_s, progress=progress
        )
        if not held:
            raise LeaseLost(self.response_id)
        self.steer_requested = self.steer_requested or steer
        return cancel

    async def cancel_requested(self, database: Database) -> bool:
        """Whether a cancel is stored while the lease is ours: a read (no lock, no commit); False when the
        database cannot say (the heartbeat asks again)."""
        with contextlib.suppress(Exception):
            async with database.read() as session:
                return await repository.cancel_requested(session, self.response_id, holder=self.holder)
        return False

    async def finish(
        self, session: AsyncSession, values: dict[str, Any], *, turn: TurnEnd | None, generation_s: float = 0.0
    ) -> None:
        """Store the final state (`values`: final_state.final_values; `turn`: the conversation it ends a turn of;
        `generation_s`: how long this run generated, for usage), through the lifecycle's ended step; LeaseLost
        when it is not ours."""
        ended = await transitions.end_held(
            session, self.response_id, holder=self.holder, values=values, turn=turn, generation_s=generation_s
        )
        if not ended:
            raise LeaseLost(self.response_id)

    async def hand_over(self, session: AsyncSession, progress: ProgressStep | None) -> bool:
        """Give the lease up now (this process stops), with the progress a takeover goes on from: whether it was
        still ours."""
        held, _, _ = await repository.renew(
            session, self.response_id, holder=self.holder, lease_s=0.0, progress=progress
        )
        return held

    async def hand_back(self, session: AsyncSession, progress: ProgressStep | None) -> bool:
        """Give the job back to the queue now (preempted), with the progress the next run goes on from: whether
        it was still ours. Unlike a hand-over its lease does not expire: the response is `queued` again, so the
        reconciler leaves it to the queue that holds it."""
        if not await transitions.hand_back(session, self.response_id, holder=self.holder):
            return False
        await repository.append_progress(session, self.response_id, progress)
        return True

    async def heartbeat(self, database: Database, generation: GenerationRun, progress: ProgressLog | None) -> None:
        """Renews the lease every third of it until cancelled; a failed renewal is retried next beat. A lost lease
        or a stored cancel request stops the generation, and so does a lease that ran out before any renewal got
        through (the database is away): the reconciler may give the job to another run from then on, so this one
        stops, and `lapsed` tells it to store and send nothing more. `progress`: stored with each beat (a
        background job whose events are not kept stores it nowhere else, for a takeover). The first check comes at
        once, a read: a cancel stored between the claim and the start whose signal was lost is seen beside the
        prefill, not in a transaction before the first token."""
        if await self.cancel_requested(database):
            generation.cancel()
        while True:
            await asyncio.sleep(self.lease_s / 3)
            started = time.monotonic()
            try:
                # A tool round stores steps of this progress too: one step at a time, each once.
                async with progress.storing if progress is not None else contextlib.nullcontext():
                    step = progress.unsaved() if progress is not None else None
                    async with database.transaction() as session:
                        cancel = await self.renew(session, step)
                    if progress is not None:
                        progress.saved(step)
            except LeaseLost:
                logger.warning(
                    "lost the lease of %s: stopping its generation (%s)", self.response_id, await self._holder(database)
                )
                generation.cancel()
                return
            except Exception as error:
                if time.monotonic() >= self._runs_out_at:
                    logger.warning(
                        "could not renew the lease of %s before it ran out (%s): stopping its generation",
                        self.response_id,
                        error,
                    )
                    self.lapsed = True
                    generation.cancel()
                    return
                logger.warning("could not renew the lease of %s (%s); trying again", self.response_id, error)
                continue
            self._runs_out_at = started + self.lease_s
            if cancel:
                generation.cancel()

    async def _holder(self, database: Database) -> str:
        """Who has the response now, for the log."""
        with contextlib.suppress(Exception):
            async with database.read() as session:
                row = await repository.reload(session, self.response_id)
                if row is not None:
                    return f"{row.status}, lease {row.lease_owner} until {row.lease_expires_at}, try {row.attempts}"
        return "unknown"
