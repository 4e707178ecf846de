"""Every status change of a response's row, each a conditional write in the caller's unit of work: queued ->
in_progress (a claim), in_progress -> queued (a takeover's release, a preempted run's hand-back), and the end,
whoever makes it (the run that holds the job, a cancel or the reconciler for one nobody holds, a `store: false`
run with no row), through one ended step that runs the registered end effects (effects.py).

Every write is conditional, so that a worker, a reconciler and a cancel racing on one response settle it once:
whoever's update matched the row won; the others see a rowcount of 0 and back off. A lease's expiry is written and
judged by the database's clock (app/db/clock.py), never by the caller's: hosts' clocks drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, null, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.clock import database_in, database_now
from app.db.models import GenerationProgressRow, ResponseRow
from app.lifecycle.effects import Ending, TurnEnd, run_effects


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a job's lease: the owning process, and the attempt its claim began (the fencing token). The
    attempt tells two runs of one process apart: a run frozen past its lease (SIGSTOP, a VM stall, a network
    partition) whose job the same process has since claimed again must not write beside the new run."""

    owner: str
    attempt: int


def unheld(now: ColumnElement[datetime]) -> ColumnElement[bool]:
    """Queued, or in progress with no live lease (its worker died, or the reconciler released it); `now`: the
    database's (app/db/clock.py)."""
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


def held_by(holder: Holder) -> ColumnElement[bool]:
    return and_(
        ResponseRow.status == "in_progress",
        ResponseRow.lease_owner == holder.owner,
        ResponseRow.attempts == holder.attempt,
    )


async def update_row(session: AsyncSession, values: dict[str, Any], *conditions: ColumnElement[bool]) -> bool:
    """One conditional UPDATE of a response's row: whether it matched (the write won)."""
    query = update(ResponseRow).where(*conditions).values(**values).execution_options(synchronize_session=False)
    result = await session.execute(query)
    return int(getattr(result, "rowcount", 0)) == 1


async def claim(
    session: AsyncSession, response_id: str, *, owner: str, lease_s: float, keep_job: bool
) -> ResponseRow | None:
    """queued (or in progress with an expired lease) -> in_progress under a lease of `lease_s` from now; the row
    as claimed, or None when someone else holds it or it has ended. `keep_job`: keep the stored job for a later
    takeover."""
    now = database_now(session)
    values: dict[str, Any] = {
        "status": "in_progress",
        "heartbeat_at": now,
        "lease_owner": owner,
        "lease_expires_at": database_in(session, lease_s),
        "attempts": ResponseRow.attempts + 1,
    }
    if not keep_job:
        values["job"] = null()  # SQL NULL: a JSON column would store None as the JSON value null
    if not await update_row(session, values, ResponseRow.id == response_id, unheld(now)):
        return None
    return await session.get(ResponseRow, response_id, populate_existing=True)


async def release_for_takeover(session: AsyncSession, response_id: str) -> bool:
    """in_progress -> queued: an expired lease becomes nobody's (its output so far kept) until a run claims it, so
    that a poller can tell that nothing generates it meanwhile."""
    values = {"status": "queued", "lease_owner": None, "lease_expires_at": None}
    return await update_row(
        session,
        values,
        ResponseRow.id == response_id,
        ResponseRow.status == "in_progress",
        or_(ResponseRow.lease_expires_at.is_(None), ResponseRow.lease_expires_at < database_now(session)),
    )


async def hand_back(session: AsyncSession, response_id: str, *, holder: Holder) -> bool:
    """in_progress -> queued: a run preempted for another tenant's job gives its job back (while `holder` holds
    it), its output so far kept, until a run claims it. Whether it was still held."""
    values = {
        "status": "queued",
        "lease_owner": None,
        "lease_expires_at": None,
        "heartbeat_at": database_now(session),
        "preemptions": ResponseRow.preemptions + 1,
    }
    return await update_row(session, values, ResponseRow.id == response_id, held_by(holder))


async def end_held(
    session: AsyncSession,
    response_id: str,
    *,
    holder: Holder,
    values: dict[str, Any],
    turn: TurnEnd | None,
    generation_s: float = 0.0,
) -> bool:
    """-> terminal, by the run whose job `holder` still holds (`values`: the final columns, status included);
    then the ended step. Whether it was still held."""
    final = {**values, "job": null(), "lease_expires_at": None}
    if not await update_row(session, final, ResponseRow.id == response_id, held_by(holder)):
        return False
    await _ended(session, response_id, turn=turn, generation_s=generation_s)
    return True


async def end_unheld(
    session: AsyncSession, response_id: str, *, values: dict[str, Any], turn: TurnEnd | None = None
) -> bool:
    """-> terminal, for a response nobody holds (queued, or its lease expired): a cancel, or a reconciler's
    verdict; then the ended step. Whether it was unheld."""
    final = {**values, "job": null(), "lease_expires_at": None}
    if not await update_row(session, final, ResponseRow.id == response_id, unheld(database_now(session))):
        return False
    await _ended(session, response_id, turn=turn)
    return True


async def end_unstored(session: AsyncSession, ending: Ending) -> None:
    """The end of a `store: false` response, which has no row to change: the ended step alone."""
    assert not ending.stored
    await run_effects(session, ending)


async def _ended(session: AsyncSession, response_id: str, *, turn: TurnEnd | None, generation_s: float = 0.0) -> None:
    """The ended step of a stored response, whoever ended it, in the unit of work of its final state: its progress
    dropped (nothing takes it over now), then every registered effect (committed with the end, or not at all)."""
    await session.execute(delete(GenerationProgressRow).where(GenerationProgressRow.response_id == response_id))
    query = select(
        ResponseRow.tenant,
        ResponseRow.model,
        ResponseRow.status,
        ResponseRow.output,
        ResponseRow.usage,
        ResponseRow.created_at,
        ResponseRow.background,
        ResponseRow.job_class,
    ).where(ResponseRow.id == response_id)
    tenant, model, status, output, used, created_at, background, job_class = (await session.execute(query)).one()
    ending = Ending(
        response_id=response_id,
        tenant=tenant,
        model=model,
        status=status,
        output=list(output or []),
        usage=used,
        created_at=created_at,
        stored=True,
        background=background,
        job_class=job_class,
        turn=turn,
        generation_s=generation_s,
    )
    await run_effects(session, ending)
