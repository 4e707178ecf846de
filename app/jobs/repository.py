"""Queries on generation jobs: lease renewals, progress, events, cancel and steer requests, reconciliation pages.
A response's status changes (the claim, a release, a hand-back, its end) are app/lifecycle's.

Every write here is conditional, so that a worker, a reconciler and a cancel racing on one response settle it
once: whoever's update matched the row won; the others see a rowcount of 0 and back off. Leases and ages are
judged by the database's clock (app/db/clock.py), never by the caller's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.clock import database_in, database_now
from app.db.models import GenerationProgressRow, ResponseEventRow, ResponseRow
from app.lifecycle.transitions import Holder, held_by, unheld, update_row

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


async def append_progress(session: AsyncSession, response_id: str, progress: ProgressStep | None) -> None:
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
    lease_s: float,
    progress: ProgressStep | None = None,
) -> tuple[bool, bool, bool]:
    """Extend the lease to `lease_s` from now (0: it ends now), and append a progress step, while `holder` holds
    it: (still held, cancel requested, steer requested)."""
    values: dict[str, Any] = {"heartbeat_at": database_now(session), "lease_expires_at": database_in(session, lease_s)}
    if not await update_row(session, values, ResponseRow.id == response_id, held_by(holder)):
        return False, False, False
    await append_progress(session, response_id, progress)
    query = select(ResponseRow.cancel_requested_at, ResponseRow.steer_requested_at).where(ResponseRow.id == response_id)
    asked = (await session.execute(query)).one_or_none()
    if asked is None:
        return True, False, False
    return True, asked[0] is not None, asked[1] is not None


async def cancel_requested(session: AsyncSession, response_id: str, *, holder: Holder) -> bool:
    """Whether a cancel is stored for the response while `holder` holds it (a read: no write, no lock)."""
    query = select(ResponseRow.cancel_requested_at).where(ResponseRow.id == response_id, held_by(holder))
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


async def request_steer(session: AsyncSession, response_id: str, *, now: datetime) -> bool:
    """Record that steering input waits for a response (the first request counts); False when it has ended."""
    await update_row(
        session,
        {"steer_requested_at": now},
        ResponseRow.id == response_id,
        ResponseRow.steer_requested_at.is_(None),
        ResponseRow.status.in_(("queued", "in_progress")),
    )
    query = select(ResponseRow.status).where(ResponseRow.id == response_id)
    return (await session.execute(query)).scalar_one_or_none() in ("queued", "in_progress")


async def request_cancel(session: AsyncSession, response_id: str, *, now: datetime) -> bool:
    """Record a cancel request (the first one counts); False when the response has already ended."""
    await update_row(
        session,
        {"cancel_requested_at": now},
        ResponseRow.id == response_id,
        ResponseRow.cancel_requested_at.is_(None),
        ResponseRow.status.in_(("queued", "in_progress")),
    )
    query = select(ResponseRow.status).where(ResponseRow.id == response_id)
    return (await session.execute(query)).scalar_one_or_none() in ("queued", "in_progress")


async def expired_leases(session: AsyncSession, *, limit: int) -> list[ResponseRow]:
    """In-progress responses whose lease ran out by the database's clock (oldest first), one page."""
    query = (
        select(ResponseRow)
        .where(
            ResponseRow.status == "in_progress",
            or_(ResponseRow.lease_expires_at.is_(None), ResponseRow.lease_expires_at < database_now(session)),
        )
        .order_by(ResponseRow.lease_expires_at)
        .limit(limit)
    )
    return list((await session.execute(query)).scalars())


async def queued_page(
    session: AsyncSession, *, older_than_s: float, after: tuple[datetime, str] | None, limit: int
) -> list[tuple[str, datetime]]:
    """(id, created_at) of responses queued for over `older_than_s` (by the database's clock), after the cursor
    `after`, in order: reconciliation reads one page a round rather than every queued job."""
    query = select(ResponseRow.id, ResponseRow.created_at).where(
        ResponseRow.status == "queued",
        ResponseRow.created_at < database_in(session, -older_than_s),
        ResponseRow.job.is_not(None),
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


async def queued_foreground(session: AsyncSession, *, older_than_s: float, limit: int) -> list[tuple[str, str]]:
    """(id, model) of foreground responses queued for over `older_than_s` (by the database's clock), oldest
    first: a client holds its connection for each."""
    query = (
        select(ResponseRow.id, ResponseRow.model)
        .where(
            ResponseRow.status == "queued",
            ResponseRow.background.is_(False),
            ResponseRow.created_at < database_in(session, -older_than_s),
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


async def lock_unheld(session: AsyncSession, response_id: str) -> ResponseRow | None:
    """The row if nobody holds it (queued, or its lease expired), locked until the transaction ends (Postgres;
    SQLite serialises writers anyway): its progress is read to end it, and must not change before the end is
    written. None when it is held or has ended."""
    query = select(ResponseRow).where(ResponseRow.id == response_id, unheld(database_now(session))).with_for_update()
    return (await session.execute(query.execution_options(populate_existing=True))).scalar_one_or_none()


async def reload(session: AsyncSession, response_id: str) -> ResponseRow | None:
    """The row as it is now, after a conditional update in this session."""
    return await session.get(ResponseRow, response_id, populate_existing=True)
