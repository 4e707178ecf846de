"""Queries on generation jobs: claims, leases and their renewal, progress, events, cancel requests, reconciliation
pages.

Every write here is conditional, so that a worker, a reconciler and a cancel racing on one response settle it
once: whoever's update matched the row won; the others see a rowcount of 0 and back off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, null, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import GenerationProgressRow, ResponseEventRow, ResponseRow
from app.usage import repository as usage
from app.webhooks.outbox import record_response_end

#: One entry of a job's progress: a text piece as the model produced it, or (a JSON object) a step of its tool
#: loop between two pieces (app/jobs/progress.py's round and call entries).
ProgressEntry = str | dict[str, Any]


@dataclass(frozen=True, slots=True)
class ProgressStep:
    """What a generation produced since its last stored step: appended as row `position`."""

    position: int
    pieces: list[ProgressEntry]
    ids: list[str]


@dataclass(frozen=True, slots=True)
class Progress:
    """Everything a job's runs stored, in order, and how many rows it took (the next step's position)."""

    pieces: list[ProgressEntry]
    ids: list[str]
    rows: int


def _unheld(now: datetime) -> ColumnElement[bool]:
    """Queued, or in progress with no live lease (its worker died, or the reconciler released it)."""
    return or_(
        ResponseRow.status == "queued",
        and_(
            ResponseRow.status == "in_progress",
            or_(
                ResponseRow.lease_owner.is_(None),
                ResponseRow.lease_expires_at.is_(None),
                ResponseRow.lease_expires_at < now,
            ),
        ),
    )


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a job's lease: the owning process, and the attempt its claim began (the fencing token). The
    attempt tells two runs of one process apart: a run frozen past its lease (SIGSTOP, a VM stall, a network
    partition) whose job the same process has since claimed again must not write beside the new run."""

    owner: str
    attempt: int


def _held_by(holder: Holder) -> ColumnElement[bool]:
    return and_(
        ResponseRow.status == "in_progress",
        ResponseRow.lease_owner == holder.owner,
        ResponseRow.attempts == holder.attempt,
    )


async def _update(session: AsyncSession, values: dict[str, Any], *conditions: ColumnElement[bool]) -> bool:
    query = update(ResponseRow).where(*conditions).values(**values).execution_options(synchronize_session=False)
    result = await session.execute(query)
    return int(getattr(result, "rowcount", 0)) == 1


async def claim(
    session: AsyncSession, response_id: str, *, owner: str, now: datetime, lease_until: datetime, keep_job: bool
) -> ResponseRow | None:
    """Take the job (queued, or in progress with an expired lease) under a lease; the row as claimed, or None
    when someone else holds it or it has ended. `keep_job`: keep the stored job for a later takeover."""
    values: dict[str, Any] = {
        "status": "in_progress",
        "heartbeat_at": now,
        "lease_owner": owner,
        "lease_expires_at": lease_until,
        "attempts": ResponseRow.attempts + 1,
    }
    if not keep_job:
        values["job"] = null()  # SQL NULL: a JSON column would store None as the JSON value null
    if not await _update(session, values, ResponseRow.id == response_id, _unheld(now)):
        return None
    row = await session.get(ResponseRow, response_id, populate_existing=True)
    return row


async def _append_progress(session: AsyncSession, response_id: str, progress: ProgressStep | None) -> None:
    if progress is not None:
        session.add(
            GenerationProgressRow(
                response_id=response_id, position=progress.position, pieces=progress.pieces, ids=progress.ids
            )
        )
        await session.flush()


async def renew(
    session: AsyncSession,
    response_id: str,
    *,
    holder: Holder,
    now: datetime,
    lease_until: datetime | None,
    progress: ProgressStep | None = None,
) -> tuple[bool, bool, bool]:
    """Extend the lease (and append a progress step) while `holder` holds it: (still held, cancel requested,
    steer requested)."""
    values: dict[str, Any] = {"heartbeat_at": now}
    if lease_until is not None:
        values["lease_expires_at"] = lease_until
    if not await _update(session, values, ResponseRow.id == response_id, _held_by(holder)):
        return False, False, False
    await _append_progress(session, response_id, progress)
    query = select(ResponseRow.cancel_requested_at, ResponseRow.steer_requested_at).where(ResponseRow.id == response_id)
    asked = (await session.execute(query)).one_or_none()
    if asked is None:
        return True, False, False
    return True, asked[0] is not None, asked[1] is not None


async def cancel_requested(session: AsyncSession, response_id: str, *, holder: Holder) -> bool:
    """Whether a cancel is stored for the response while `holder` holds it (a read: no write, no lock)."""
    query = select(ResponseRow.cancel_requested_at).where(ResponseRow.id == response_id, _held_by(holder))
    return (await session.execute(query)).scalar_one_or_none() is not None


async def progress_of(session: AsyncSession, response_id: str) -> Progress | None:
    """The progress a job's runs stored, joined; None when there is none."""
    query = (
        select(GenerationProgressRow.pieces, GenerationProgressRow.ids)
        .where(GenerationProgressRow.response_id == response_id)
        .order_by(GenerationProgressRow.position)
    )
    steps = (await session.execute(query)).all()
    if not steps:
        return None
    return Progress(
        pieces=[piece for pieces, _ in steps for piece in pieces],
        ids=[id_ for _, ids in steps for id_ in ids],
        rows=len(steps),
    )


async def _drop_progress(session: AsyncSession, response_id: str) -> None:
    await session.execute(delete(GenerationProgressRow).where(GenerationProgressRow.response_id == response_id))


async def _ended(session: AsyncSession, response_id: str, *, generation_s: float = 0.0) -> None:
    """What follows a response's end in the same unit of work, whoever ended it: its progress dropped, its webhook
    event written to the outbox and its usage added to its tenant's day (committed with the final state, or not at
    all). `generation_s`: how long the run that ended it generated (0 when nobody was running it)."""
    await _drop_progress(session, response_id)
    query = select(
        ResponseRow.tenant,
        ResponseRow.status,
        ResponseRow.background,
        ResponseRow.job_class,
        ResponseRow.model,
        ResponseRow.usage,
        ResponseRow.created_at,
    ).where(ResponseRow.id == response_id)
    tenant, status, background, job_class, model, used, created_at = (await session.execute(query)).one()
    # A batch line runs as a background response, but nobody asked for its events: its batch's end is announced.
    announced = background and job_class != "batch"
    await record_response_end(session, tenant=tenant, response_id=response_id, status=status, background=announced)
    entry = usage.entry_of(tenant=tenant, model=model, day=created_at.date(), usage=used, generation_s=generation_s)
    await usage.add(session, entry)


async def finish_held(
    session: AsyncSession, response_id: str, *, holder: Holder, values: dict[str, Any], generation_s: float = 0.0
) -> bool:
    """The final state of a response whose job `holder` still holds; the job and its progress are dropped."""
    final = {**values, "job": null(), "lease_expires_at": None}
    if not await _update(session, final, ResponseRow.id == response_id, _held_by(holder)):
        return False
    await _ended(session, response_id, generation_s=generation_s)
    return True


async def end_unheld(session: AsyncSession, response_id: str, *, now: datetime, values: dict[str, Any]) -> bool:
    """End a response nobody holds (queued, or its lease expired): a cancel, or a reconciler's verdict."""
    final = {**values, "job": null(), "lease_expires_at": None}
    if not await _update(session, final, ResponseRow.id == response_id, _unheld(now)):
        return False
    await _ended(session, response_id)
    return True


async def expire_leases(session: AsyncSession) -> int:
    """Every in-progress response's lease ends now (embedded start-up: no run of the previous process is alive),
    for reconciliation to take it over or end it; how many there were."""
    query = (
        update(ResponseRow)
        .where(ResponseRow.status == "in_progress")
        .values(lease_expires_at=None)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(await session.execute(query), "rowcount", 0))


async def release_for_takeover(session: AsyncSession, response_id: str, *, now: datetime) -> bool:
    """An expired lease becomes nobody's: the response reads `queued` again (its output so far kept) until a run
    claims it, so that a poller can tell that nothing generates it meanwhile."""
    values = {"status": "queued", "lease_owner": None, "lease_expires_at": None}
    return await _update(
        session,
        values,
        ResponseRow.id == response_id,
        ResponseRow.status == "in_progress",
        or_(ResponseRow.lease_expires_at.is_(None), ResponseRow.lease_expires_at < now),
    )


async def request_steer(session: AsyncSession, response_id: str, *, now: datetime) -> bool:
    """Record that steering input waits for a response (the first request counts); False when it has ended."""
    await _update(
        session,
        {"steer_requested_at": now},
        ResponseRow.id == response_id,
        ResponseRow.steer_requested_at.is_(None),
        ResponseRow.status.in_(("queued", "in_progress")),
    )
    query = select(ResponseRow.status).where(ResponseRow.id == response_id)
    return (await session.execute(query)).scalar_one_or_none() in ("queued", "in_progress")


async def hand_back(
    session: AsyncSession, response_id: str, *, holder: Holder, now: datetime, progress: ProgressStep | None
) -> bool:
    """A run preempted for another tenant's job gives its job back (while `holder` holds it), appending
    `progress`: the response reads `queued` again, its output so far kept, until a run claims it. Whether it was
    still held."""
    values = {
        "status": "queued",
        "lease_owner": None,
        "lease_expires_at": None,
        "heartbeat_at": now,
        "preemptions": ResponseRow.preemptions + 1,
    }
    if not await _update(session, values, ResponseRow.id == response_id, _held_by(holder)):
        return False
    await _append_progress(session, response_id, progress)
    return True


async def request_cancel(session: AsyncSession, response_id: str, *, now: datetime) -> bool:
    """Record a cancel request (the first one counts); False when the response has already ended."""
    await _update(
        session,
        {"cancel_requested_at": now},
        ResponseRow.id == response_id,
        ResponseRow.cancel_requested_at.is_(None),
        ResponseRow.status.in_(("queued", "in_progress")),
    )
    query = select(ResponseRow.status).where(ResponseRow.id == response_id)
    return (await session.execute(query)).scalar_one_or_none() in ("queued", "in_progress")


async def expired_leases(session: AsyncSession, *, now: datetime, limit: int) -> list[ResponseRow]:
    """In-progress responses whose lease ran out (oldest first), one page."""
    query = (
        select(ResponseRow)
        .where(
            ResponseRow.status == "in_progress",
            or_(ResponseRow.lease_expires_at.is_(None), ResponseRow.lease_expires_at < now),
        )
        .order_by(ResponseRow.lease_expires_at)
        .limit(limit)
    )
    return list((await session.execute(query)).scalars())


async def queued_page(
    session: AsyncSession, *, created_before: datetime, after: tuple[datetime, str] | None, limit: int
) -> list[tuple[str, datetime]]:
    """(id, created_at) of responses queued since before `created_before`, after the cursor `after`, in order:
    reconciliation reads one page a round rather than every queued job."""
    query = select(ResponseRow.id, ResponseRow.created_at).where(
        ResponseRow.status == "queued", ResponseRow.created_at < created_before, ResponseRow.job.is_not(None)
    )
    if after is not None:
        query = query.where(
            or_(
                ResponseRow.created_at > after[0],
                and_(ResponseRow.created_at == after[0], ResponseRow.id > after[1]),
            )
        )
    query = query.order_by(ResponseRow.created_at, ResponseRow.id).limit(limit)
    return [(response_id, created_at) for response_id, created_at in (await session.execute(query)).all()]


async def queued_foreground(session: AsyncSession, *, created_before: datetime, limit: int) -> list[tuple[str, str]]:
    """(id, model) of foreground responses queued since before `created_before`, oldest first: a client holds
    its connection for each."""
    query = (
        select(ResponseRow.id, ResponseRow.model)
        .where(
            ResponseRow.status == "queued",
            ResponseRow.background.is_(False),
            ResponseRow.created_at < created_before,
            ResponseRow.job.is_not(None),
        )
        .order_by(ResponseRow.created_at)
        .limit(limit)
    )
    return [(response_id, model) for response_id, model in (await session.execute(query)).all()]


async def get_job(session: AsyncSession, response_id: str) -> dict[str, Any] | None:
    query = select(ResponseRow.job).where(ResponseRow.id == response_id)
    return (await session.execute(query)).scalar_one_or_none()


async def insert_events(session: AsyncSession, response_id: str, events: Sequence[dict[str, Any]]) -> None:
    session.add_all(
        ResponseEventRow(response_id=response_id, sequence_number=event["sequence_number"], event=event)
        for event in events
    )
    await session.flush()


async def next_sequence_number(session: AsyncSession, response_id: str) -> int:
    query = select(func.max(ResponseEventRow.sequence_number)).where(ResponseEventRow.response_id == response_id)
    last = (await session.execute(query)).scalar_one_or_none()
    return 0 if last is None else int(last) + 1


async def last_event(session: AsyncSession, response_id: str) -> dict[str, Any] | None:
    query = (
        select(ResponseEventRow.event)
        .where(ResponseEventRow.response_id == response_id)
        .order_by(ResponseEventRow.sequence_number.desc())
        .limit(1)
    )
    return (await session.execute(query)).scalar_one_or_none()


async def lock_unheld(session: AsyncSession, response_id: str, *, now: datetime) -> ResponseRow | None:
    """The row if nobody holds it (queued, or its lease expired), locked until the transaction ends (Postgres;
    SQLite serialises writers anyway): its progress is read to end it, and must not change before the end is
    written. None when it is held or has ended."""
    query = select(ResponseRow).where(ResponseRow.id == response_id, _unheld(now)).with_for_update()
    return (await session.execute(query.execution_options(populate_existing=True))).scalar_one_or_none()


async def reload(session: AsyncSession, response_id: str) -> ResponseRow | None:
    """The row as it is now, after a conditional update in this session."""
    return await session.get(ResponseRow, response_id, populate_existing=True)
