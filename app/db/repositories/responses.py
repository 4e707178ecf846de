"""Queries on responses and their input items: insert, fetch, the chain walk, paging, delete, transitions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, bindparam, delete, exists, literal, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from app.db.models import InputItemRow, ResponseEventRow, ResponseRow
from app.db.repositories.paging import page_by_position

MAX_CHAIN_DEPTH = 10_000
#: One tenant's response by id, built once: building the expression took longer than running it (SQLAlchemy
#: caches the compiled form, not the expression).
_RESPONSE_OF_TENANT = select(ResponseRow).where(
    ResponseRow.id == bindparam("response_id"), ResponseRow.tenant == bindparam("tenant")
)


async def insert_response(session: AsyncSession, row: ResponseRow, items: Iterable[dict[str, Any]]) -> None:
    session.add(row)
    await session.flush()
    session.add_all(
        InputItemRow(response_id=row.id, position=position, item_id=item["id"], item=item)
        for position, item in enumerate(items)
    )
    await session.flush()


async def get_response(session: AsyncSession, response_id: str, tenant: str) -> ResponseRow | None:
    result = await session.execute(_RESPONSE_OF_TENANT, {"response_id": response_id, "tenant": tenant})
    return result.scalar_one_or_none()


async def get_chain(session: AsyncSession, response_id: str, tenant: str) -> list[ResponseRow]:
    """The response and every ancestor by previous_response_id, oldest first: one recursive query."""
    anchor = select(
        ResponseRow.id.label("id"),
        ResponseRow.previous_response_id.label("parent"),
        literal(0).label("depth"),
    ).where(ResponseRow.id == response_id, ResponseRow.tenant == tenant)
    chain = anchor.cte("chain", recursive=True)
    step = (
        select(ResponseRow.id, ResponseRow.previous_response_id, chain.c.depth + 1)
        .join(chain, ResponseRow.id == chain.c.parent)
        .where(ResponseRow.tenant == tenant, chain.c.depth < MAX_CHAIN_DEPTH)
    )
    chain = chain.union_all(step)
    query = select(ResponseRow).join(chain, ResponseRow.id == chain.c.id).order_by(chain.c.depth.desc())
    return list((await session.execute(query)).scalars())


async def get_input_items(session: AsyncSession, response_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The input items of several responses at once, each list in request order."""
    query = (
        select(InputItemRow)
        .where(InputItemRow.response_id.in_(response_ids))
        .order_by(InputItemRow.response_id, InputItemRow.position)
    )
    items: dict[str, list[dict[str, Any]]] = {response_id: [] for response_id in response_ids}
    for row in (await session.execute(query)).scalars():
        items[row.response_id].append(row.item)
    return items


async def find_item_position(session: AsyncSession, response_id: str, item_id: str) -> int | None:
    query = (
        select(InputItemRow.position)
        .where(InputItemRow.response_id == response_id, InputItemRow.item_id == item_id)
        .order_by(InputItemRow.position)
        .limit(1)
    )
    return (await session.execute(query)).scalar_one_or_none()


async def page_input_items(
    session: AsyncSession,
    response_id: str,
    *,
    limit: int,
    order: Literal["asc", "desc"],
    after_position: int | None,
) -> tuple[list[dict[str, Any]], bool]:
    """One page of a response's input items and whether more follow."""
    query = select(InputItemRow.item).where(InputItemRow.response_id == response_id)
    return await page_by_position(
        session, query, InputItemRow.position, limit=limit, order=order, after_position=after_position
    )


async def delete_response(session: AsyncSession, response_id: str, tenant: str) -> bool:
    owned = await get_response(session, response_id, tenant)
    if owned is None:
        return False
    await session.execute(delete(InputItemRow).where(InputItemRow.response_id == response_id))
    await session.execute(delete(ResponseRow).where(ResponseRow.id == response_id))
    return True


async def _update_while_status(
    session: AsyncSession, from_statuses: Iterable[str], values: dict[str, Any], *conditions: ColumnElement[bool]
) -> int:
    query = (
        update(ResponseRow)
        .where(ResponseRow.status.in_(list(from_statuses)), *conditions)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    result = await session.execute(query)
    return int(getattr(result, "rowcount", 0))


async def transition(
    session: AsyncSession, response_id: str, *, from_statuses: Iterable[str], values: dict[str, Any]
) -> bool:
    """Conditional update: applies `values` only while the status is one of `from_statuses`."""
    return await _update_while_status(session, from_statuses, values, ResponseRow.id == response_id) == 1


async def insert_events(session: AsyncSession, response_id: str, events: Sequence[dict[str, Any]]) -> None:
    session.add_all(
        ResponseEventRow(response_id=response_id, sequence_number=event["sequence_number"], event=event)
        for event in events
    )
    await session.flush()


async def events_after(session: AsyncSession, response_id: str, after_sequence: int) -> list[dict[str, Any]]:
    query = (
        select(ResponseEventRow.event)
        .where(ResponseEventRow.response_id == response_id, ResponseEventRow.sequence_number > after_sequence)
        .order_by(ResponseEventRow.sequence_number)
    )
    return list((await session.execute(query)).scalars())


async def get_by_id(session: AsyncSession, response_id: str) -> ResponseRow | None:
    """Any tenant's response: only for callers that already checked who may see it."""
    return await session.get(ResponseRow, response_id)


async def get_status(session: AsyncSession, response_id: str) -> str | None:
    query = select(ResponseRow.status).where(ResponseRow.id == response_id)
    return (await session.execute(query)).scalar_one_or_none()


async def prune_events(session: AsyncSession, *, ended_before: datetime, statuses: Iterable[str], limit: int) -> int:
    """Delete the stored events of up to `limit` responses in `statuses` last updated before `ended_before`;
    returns how many responses. Every stored stream has an event 0, found through the events' primary key: the
    scan covers only the events still kept, not every response."""
    ids = (
        select(ResponseEventRow.response_id)
        .join(ResponseRow, ResponseRow.id == ResponseEventRow.response_id)
        .where(
            ResponseEventRow.sequence_number == 0,
            ResponseRow.status.in_(list(statuses)),
            ResponseRow.updated_at < ended_before,
        )
        .limit(limit)
    )
    found = list((await session.execute(ids)).scalars())
    if found:
        await session.execute(delete(ResponseEventRow).where(ResponseEventRow.response_id.in_(found)))
    return len(found)


async def purge_expired(session: AsyncSession, *, created_before: datetime, statuses: Iterable[str], limit: int) -> int:
    """Delete up to `limit` responses in `statuses` created before `created_before` that no stored response
    continues (previous_response_id), with their input items, output items and events (the foreign keys
    cascade); returns how many. Chains so go from their end: a response's ancestors outlive it."""
    child = aliased(ResponseRow)
    deletable = (
        ResponseRow.status.in_(list(statuses)),
        ResponseRow.created_at < created_before,
        ~exists().where(child.previous_response_id == ResponseRow.id),
    )
    found = list((await session.execute(select(ResponseRow.id).where(*deletable).limit(limit))).scalars())
    if not found:
        return 0
    # The conditions again at delete time: a response chained from one of these meanwhile keeps it.
    query = (
        delete(ResponseRow).where(ResponseRow.id.in_(found), *deletable).execution_options(synchronize_session=False)
    )
    return int(getattr(await session.execute(query), "rowcount", 0))
