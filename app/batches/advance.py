"""The periodic advance of every batch, run by each API node (app/main.py): validate new batches, stop the lines
of cancelled and expired ones, take back submissions whose node died, collect ended lines, submit a bounded number
of waiting lines, keep `request_counts` live, and write the files of batches that are done. Each step is a
conditional UPDATE from the state it expects, so nodes advancing at once never take the same step twice; `now`
is injectable (tests move the clock past a window rather than waiting)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from app.batches import repository
from app.batches.finalizing import write_result_files
from app.batches.lines import collect_ended_lines, line_error, submit_line
from app.batches.validation import check_file, line_requests
from app.db.base import utc_now
from app.db.models import BatchLineRow, BatchRow
from app.errors import InvalidRequest
from app.ids import new_id
from app.responses.cancellation import request_cancellation
from app.responses.context import resolve_model
from app.runtime import Runtime
from app.webhooks.outbox import record_event

logger = logging.getLogger(__name__)

#: How long a node holds a batch it validates or finalizes before another may take it over (it died).
CLAIM_S = 600.0
#: How long a line may stay claimed for submission before another node takes it back (its node died).
SUBMIT_CLAIM_S = 120.0
#: Batches looked at in each step of one round.
BATCHES_PER_STEP = 20
#: Lines stored at once while a validated batch's lines are written.
LINES_PER_INSERT = 500

EXPIRED = line_error("batch_expired", "This request could not be executed before the completion window expired.")
CANCELLED = line_error("batch_cancelled", "This request was not executed: the batch was cancelled.")


class _Superseded(Exception):
    """The batch changed (cancelled) while this node validated or finalized it: what it wrote is rolled back."""


async def advance_batches(runtime: Runtime, now: datetime | None = None) -> None:
    """One round of every step; each bounded, so a round stays short whatever the batches hold."""
    async with runtime.database.read() as session:
        if not await repository.any_moving_batch(session):
            return
    moment = now or utc_now()
    per_round = runtime.settings.batch_lines_per_round
    await _validate_new(runtime, moment)
    await _stop_lines(runtime, moment)
    await _take_back_submissions(runtime, moment)
    await collect_ended_lines(runtime, per_round * 4)
    await _submit_waiting(runtime, moment)
    await _count_and_finish(runtime, moment)


async def _validate_new(runtime: Runtime, now: datetime) -> None:
    async with runtime.database.read() as session:
        waiting = await repository.batches_in(session, ("validating",), BATCHES_PER_STEP)
    for batch in waiting:
        async with runtime.database.transaction() as session:
            claimed = await repository.claim_batch(
                session, batch.id, "validating", now=now, until=now + timedelta(seconds=CLAIM_S)
            )
        if claimed:
            await _validate(runtime, batch, now)


async def _validate(runtime: Runtime, batch: BatchRow, now: datetime) -> None:
    database, settings = runtime.database, runtime.settings
    errors, count = await check_file(database, batch.input_file_id, batch.endpoint, settings)
    if errors:
        async with database.transaction() as session:
            failed = await repository.move_batch(
                session,
                batch.id,
                ("validating",),
                status="failed",
                failed_at=now,
                claimed_until=None,
                errors={"object": "list", "data": [error.model_dump() for error in errors]},
            )
            if failed:  # the webhook event commits with the end it announces, or not at all
                await record_event(session, tenant=batch.tenant, event_type="batch.failed", object_id=batch.id)
        return
    model: str | None = None
    try:
        async with database.transaction() as session:
            rows: list[BatchLineRow] = []
            async for request in line_requests(database, batch.input_file_id, batch.endpoint, settings):
                if model is None:
                    model = batch_model(runtime, request.body.get("model"))
                # The response id is fixed here, once: whoever submits the line stores its response under it.
                rows.append(
                    BatchLineRow(
                        batch_id=batch.id,
                        line=request.line,
                        id=new_id("batch_req"),
                        custom_id=request.custom_id,
                        response_id=new_id("resp"),
                        body=request.body,
                        keep_response=request.body.get("store") is not False,
                        state="pending",
                    )
                )
                if len(rows) >= LINES_PER_INSERT:
                    await repository.insert_lines(session, rows)
                    rows = []
            await repository.insert_lines(session, rows)
            started = await repository.move_batch(
                session,
                batch.id,
                ("validating",),
                status="in_progress",
                in_progress_at=now,
                total=count,
                model=model,
                claimed_until=None,
            )
            if not started:
                raise _Superseded
    except _Superseded:
        logger.info("batch %s was cancelled while it was validated", batch.id)


def batch_model(runtime: Runtime, requested: object) -> str:
    """The model a batch reports: the served model its first line names, resolved as that line's create resolves
    it (an alias, or none named: the default model); a name the server does not serve, as the line gave it (the
    line itself then ends with the create's 400)."""
    try:
        return resolve_model(requested if isinstance(requested, str) else None, runtime.models, runtime.settings).id
    except InvalidRequest:
        return str(requested)[:256]


async def _stop_lines(runtime: Runtime, now: datetime) -> None:
    """Cancelled and expired batches: their waiting lines end at once; their running ones are cancelled
    (through the responses' own cancellation) and collected when they end, whatever they produced kept."""
    async with runtime.database.read() as session:
        cancelling = await repository.batches_in(session, ("cancelling",), BATCHES_PER_STEP)
        expired = await repository.batches_past_window(session, now=now, limit=BATCHES_PER_STEP)
    for batch, error in [*((batch, CANCELLED) for batch in cancelling), *((batch, EXPIRED) for batch in expired)]:
        stopping: list[str] = []
        async with runtime.database.transaction() as session:
            await repository.settle_pending(session, batch.id, error)
            for line in await repository.lines_in(
                session, batch.id, ("running",), runtime.settings.batch_lines_per_round
            ):
                if await repository.move_line(
                    session, batch.id, line.line, ("running",), state="stopping", error=error
                ):
                    stopping.append(line.response_id)
        for response_id in stopping:
            await request_cancellation(runtime, response_id)


async def _take_back_submissions(runtime: Runtime, now: datetime) -> None:
    """A line claimed for submission long ago: running if its response was stored, else waiting again."""
    claimed_before = now - timedelta(seconds=SUBMIT_CLAIM_S)
    async with runtime.database.read() as session:
        stale = await repository.stale_submissions(session, claimed_before=claimed_before, limit=100)
    if not stale:
        return
    async with runtime.database.transaction() as session:
        for line in stale:
            if await repository.response_exists(session, line.response_id):
                await repository.move_line(session, line.batch_id, line.line, ("submitting",), state="running")
            else:
                await repository.move_line(
                    session, line.batch_id, line.line, ("submitting",), state="pending", claimed_at=None
                )


async def _submit_waiting(runtime: Runtime, now: datetime) -> None:
    """Submit waiting lines, at most batch_lines_per_round, and only while fewer than batch_max_running_lines
    are submitted and unfinished: a batch of 50,000 never puts 50,000 jobs on the queue. A tenant whose rate limit
    refused a line this round has no more of its lines tried until the next (the refused one waits for the
    limit's retry-after)."""
    settings = runtime.settings
    async with runtime.database.read() as session:
        active = await repository.count_active_lines(session)
        budget = min(settings.batch_lines_per_round, settings.batch_max_running_lines - active)
        waiting = await repository.pending_lines(session, now=now, limit=budget) if budget > 0 else []
    paced: set[str] = set()
    for line, tenant in waiting:
        if tenant in paced:
            continue
        async with runtime.database.transaction() as session:
            claimed = await repository.move_line(
                session, line.batch_id, line.line, ("pending",), state="submitting", claimed_at=now
            )
        if not claimed:
            continue  # another node took it
        try:
            if not await submit_line(runtime, line, tenant, now):
                paced.add(tenant)
        except Exception:
            logger.exception("could not submit batch line %s/%d; it waits for the next round", line.batch_id, line.line)
            async with runtime.database.transaction() as session:
                await repository.move_line(
                    session, line.batch_id, line.line, ("submitting",), state="pending", claimed_at=None
                )


async def _count_and_finish(runtime: Runtime, now: datetime) -> None:
    async with runtime.database.read() as session:
        moving = await repository.batches_in(session, ("in_progress", "cancelling", "finalizing"), BATCHES_PER_STEP * 5)
    for batch in moving:
        async with runtime.database.transaction() as session:
            completed, failed, unsettled = await repository.line_counts(session, batch.id)
            await repository.move_batch(session, batch.id, (batch.status,), completed=completed, failed=failed)
        if unsettled == 0:
            await _finish(runtime, batch, now)


async def _finish(runtime: Runtime, batch: BatchRow, now: datetime) -> None:
    """Every line settled: the files written and the batch ended, by one node (a claim), in one unit of work."""
    status = batch.status
    if status == "in_progress" and batch.expires_at > now:
        async with runtime.database.transaction() as session:
            if not await repository.move_batch(
                session, batch.id, ("in_progress",), status="finalizing", finalizing_at=now
            ):
                return
        status = "finalizing"
    final = {"finalizing": "completed", "cancelling": "cancelled", "in_progress": "expired"}[status]
    async with runtime.database.transaction() as session:
        if not await repository.claim_batch(session, batch.id, status, now=now, until=now + timedelta(seconds=CLAIM_S)):
            return
    try:
        async with runtime.database.transaction() as session:
            output_id, error_id = await write_result_files(session, batch)
            ended = await repository.move_batch(
                session,
                batch.id,
                (status,),
                status=final,
                output_file_id=output_id,
                error_file_id=error_id,
                claimed_until=None,
                **{f"{final}_at": now},
            )
            if not ended:
                raise _Superseded
            await record_event(session, tenant=batch.tenant, event_type=f"batch.{final}", object_id=batch.id)
    except _Superseded:
        logger.info("batch %s changed while its files were written; they are not kept", batch.id)
