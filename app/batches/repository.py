"""Queries on batches and their lines. Every change of state is a conditional UPDATE (from the state it expects),
so that several API nodes advancing batches at once never both take the same step (SQLite and Postgres alike)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import BatchLineRow, BatchRow, ResponseRow
from app.db.paging import page_by_creation
from app.events.terminal import TERMINAL_STATUSES

#: The statuses of a batch that the periodic advance still moves.
MOVING_BATCH_STATUSES = ("validating", "in_progress", "finalizing", "cancelling")
#: The statuses a batch ends in: it never changes again.
ENDED_BATCH_STATUSES = ("completed", "failed", "expired", "cancelled")
#: The states of a line submitted and not yet collected.
ACTIVE_LINE_STATES = ("submitting", "running", "stopping")
#: The states of a line not yet written as an output line.
UNSETTLED_LINE_STATES = ("pending", *ACTIVE_LINE_STATES)


def _changed(result: object) -> int:
    return int(getattr(result, "rowcount", 0))


async def insert_batch(session: AsyncSession, row: BatchRow) -> None:
    session.add(row)
    await session.flush()


async def get_batch(session: AsyncSession, batch_id: str, tenant: str) -> BatchRow | None:
    query = select(BatchRow).where(BatchRow.id == batch_id, BatchRow.tenant == tenant)
    return (await session.execute(query)).scalar_one_or_none()


async def get_batch_by_id(session: AsyncSession, batch_id: str) -> BatchRow | None:
    return (await session.execute(select(BatchRow).where(BatchRow.id == batch_id))).scalar_one_or_none()


async def page_batches(
    session: AsyncSession, tenant: str, *, limit: int, after: BatchRow | None
) -> tuple[list[BatchRow], bool]:
    """One page of the tenant's batches, newest first, after the `after` row (ties broken by id)."""
    query = select(BatchRow).where(BatchRow.tenant == tenant)
    return await page_by_creation(session, BatchRow, query, limit=limit, order="desc", after=after)


async def batches_in(session: AsyncSession, statuses: Collection[str], limit: int) -> list[BatchRow]:
    query = select(BatchRow).where(BatchRow.status.in_(statuses)).order_by(BatchRow.created_at).limit(limit)
    return list((await session.execute(query)).scalars())


async def claim_batch(session: AsyncSession, batch_id: str, status: str, *, now: datetime, until: datetime) -> bool:
    """Hold the batch (in `status`) until `until` for one step that takes a while (validating, finalizing), if
    nobody holds it: an expired claim (its node died) is taken again."""
    query = (
        update(BatchRow)
        .where(
            BatchRow.id == batch_id,
            BatchRow.status == status,
            or_(BatchRow.claimed_until.is_(None), BatchRow.claimed_until < now),
        )
        .values(claimed_until=until)
        .execution_options(synchronize_session=False)
    )
    return _changed(await session.execute(query)) == 1


async def move_batch(session: AsyncSession, batch_id: str, from_statuses: Collection[str], **values: Any) -> bool:
    """Set `values` (a new status, its moment) if the batch is still in one of `from_statuses`."""
    query = (
        update(BatchRow)
        .where(BatchRow.id == batch_id, BatchRow.status.in_(from_statuses))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return _changed(await session.execute(query)) == 1


async def insert_lines(session: AsyncSession, rows: Sequence[BatchLineRow]) -> None:
    session.add_all(rows)
    await session.flush()
    for row in rows:  # written: not kept in the session's identity map (a batch has up to 50,000)
        session.expunge(row)


async def count_active_lines(session: AsyncSession) -> int:
    query = select(func.count()).select_from(BatchLineRow).where(BatchLineRow.state.in_(ACTIVE_LINE_STATES))
    return int((await session.execute(query)).scalar_one())


async def pending_lines(session: AsyncSession, *, now: datetime, limit: int) -> list[tuple[BatchLineRow, str]]:
    """Lines waiting to be submitted (and no longer waiting for a rate limit), of running batches not past their
    window, oldest batch first; with their batch's tenant."""
    query = (
        select(BatchLineRow, BatchRow.tenant)
        .join(BatchRow, BatchRow.id == BatchLineRow.batch_id)
        .where(
            BatchLineRow.state == "pending",
            or_(BatchLineRow.wait_until.is_(None), BatchLineRow.wait_until <= now),
            BatchRow.status == "in_progress",
            BatchRow.expires_at > now,
        )
        .order_by(BatchRow.created_at, BatchLineRow.batch_id, BatchLineRow.line)
        .limit(limit)
    )
    return [(line, tenant) for line, tenant in (await session.execute(query)).all()]


async def move_line(
    session: AsyncSession, batch_id: str, line: int, from_states: Collection[str], **values: Any
) -> bool:
    """Set `values` (a new state, a result) if the line is still in one of `from_states`."""
    query = (
        update(BatchLineRow)
        .where(BatchLineRow.batch_id == batch_id, BatchLineRow.line == line, BatchLineRow.state.in_(from_states))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return _changed(await session.execute(query)) == 1


async def settle_pending(session: AsyncSession, batch_id: str, error: dict[str, str]) -> int:
    """Every line of the batch not yet submitted ends with `error` (expired, cancelled); how many."""
    query = (
        update(BatchLineRow)
        .where(BatchLineRow.batch_id == batch_id, BatchLineRow.state == "pending")
        .values(state="done", error=error)
        .execution_options(synchronize_session=False)
    )
    return _changed(await session.execute(query))


async def lines_in(session: AsyncSession, batch_id: str, states: Collection[str], limit: int) -> list[BatchLineRow]:
    query = (
        select(BatchLineRow)
        .where(BatchLineRow.batch_id == batch_id, BatchLineRow.state.in_(states))
        .order_by(BatchLineRow.line)
        .limit(limit)
    )
    return list((await session.execute(query)).scalars())


async def stale_submissions(session: AsyncSession, *, claimed_before: datetime, limit: int) -> list[BatchLineRow]:
    """Lines a node claimed to submit before `claimed_before` and never marked running (it died, or failed)."""
    query = (
        select(BatchLineRow)
        .where(BatchLineRow.state == "submitting", BatchLineRow.claimed_at < claimed_before)
        .limit(limit)
    )
    return list((await session.execute(query)).scalars())


async def ended_lines(session: AsyncSession, limit: int) -> list[tuple[BatchLineRow, ResponseRow | None]]:
    """Running lines whose response has ended (or is gone: deleted while it ran), with their response row."""
    query = (
        select(BatchLineRow, ResponseRow)
        .outerjoin(ResponseRow, ResponseRow.id == BatchLineRow.response_id)
        .where(
            BatchLineRow.state.in_(("running", "stopping")),
            or_(ResponseRow.id.is_(None), ResponseRow.status.in_(TERMINAL_STATUSES)),
        )
        .limit(limit)
    )
    return [(line, response) for line, response in (await session.execute(query)).all()]


async def response_exists(session: AsyncSession, response_id: str) -> bool:
    query = select(ResponseRow.id).where(ResponseRow.id == response_id)
    return (await session.execute(query)).scalar_one_or_none() is not None


async def line_counts(session: AsyncSession, batch_id: str) -> tuple[int, int, int]:
    """(completed, failed, unsettled): lines written to the output file, to the error file, and not yet written."""
    done = BatchLineRow.state == "done"
    query = select(
        func.count().filter(and_(done, BatchLineRow.status_code == 200)),
        func.count().filter(and_(done, or_(BatchLineRow.status_code.is_(None), BatchLineRow.status_code != 200))),
        func.count().filter(BatchLineRow.state != "done"),
    ).where(BatchLineRow.batch_id == batch_id)
    completed, failed, unsettled = (await session.execute(query)).one()
    return int(completed), int(failed), int(unsettled)


async def done_lines(session: AsyncSession, batch_id: str, *, after_line: int, limit: int) -> list[BatchLineRow]:
    """Settled lines in order of their line number, after `after_line` (the files are written a page at a time)."""
    query = (
        select(BatchLineRow)
        .where(BatchLineRow.batch_id == batch_id, BatchLineRow.state == "done", BatchLineRow.line > after_line)
        .order_by(BatchLineRow.line)
        .limit(limit)
    )
    rows = list((await session.execute(query)).scalars())
    for row in rows:
        session.expunge(row)
    return rows


async def batches_past_window(session: AsyncSession, *, now: datetime, limit: int) -> list[BatchRow]:
    """Running batches whose completion window has passed."""
    query = (
        select(BatchRow)
        .where(BatchRow.status == "in_progress", BatchRow.expires_at <= now)
        .order_by(BatchRow.expires_at)
        .limit(limit)
    )
    return list((await session.execute(query)).scalars())


async def delete_lines(session: AsyncSession, batch_id: str) -> None:
    """A finished batch's lines: their results are in its files now."""
    await session.execute(delete(BatchLineRow).where(BatchLineRow.batch_id == batch_id))


async def add_usage(session: AsyncSession, batch_id: str, usage: dict[str, Any]) -> None:
    """Add a collected line's token usage to its batch's (an increment: nodes collecting at once lose nothing)."""
    input_details = usage.get("input_tokens_details") or {}
    output_details = usage.get("output_tokens_details") or {}
    query = (
        update(BatchRow)
        .where(BatchRow.id == batch_id)
        .values(
            input_tokens=BatchRow.input_tokens + int(usage.get("input_tokens") or 0),
            cached_tokens=BatchRow.cached_tokens + int(input_details.get("cached_tokens") or 0),
            output_tokens=BatchRow.output_tokens + int(usage.get("output_tokens") or 0),
            reasoning_tokens=BatchRow.reasoning_tokens + int(output_details.get("reasoning_tokens") or 0),
        )
        .execution_options(synchronize_session=False)
    )
    await session.execute(query)


async def any_moving_batch(session: AsyncSession) -> bool:
    """Whether any batch is still to be advanced (an idle round stops at this one query)."""
    query = select(BatchRow.id).where(BatchRow.status.in_(MOVING_BATCH_STATUSES)).limit(1)
    return (await session.execute(query)).first() is not None


async def purge_ended(session: AsyncSession, *, created_before: datetime, limit: int) -> int:
    """Delete up to `limit` ended batches created before `created_before`, with any lines left; how many. Their
    files are the Files API's (kept by their own rule), their lines' responses the responses' (ditto)."""
    old = (
        select(BatchRow.id)
        .where(BatchRow.status.in_(ENDED_BATCH_STATUSES), BatchRow.created_at < created_before)
        .order_by(BatchRow.created_at)
        .limit(limit)
    )
    ids = list((await session.execute(old)).scalars())
    if ids:
        await session.execute(delete(BatchLineRow).where(BatchLineRow.batch_id.in_(ids)))
        await session.execute(delete(BatchRow).where(BatchRow.id.in_(ids)))
    return len(ids)
