"""Queries on responses and their input items: insert, fetch, the chain walk, the list (one tenant's responses,
filtered, a page at a time by (created_at, id)), delete, events read back, and retention's prune and purge."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Select,
    bindparam,
    delete,
    exists,
    func,
    literal,
    literal_column,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import aliased

from app.db.models import InputItemRow, ResponseEventRow, ResponseRow
from app.db.paging import Query, in_creation_order, page_by_creation
from app.responses.schemas import ResponseFilters

MAX_CHAIN_DEPTH = 10_000


class ResponseVersion(NamedTuple):
    """A stored response's id, the updated_at its cached JSON is checked against, and its status."""

    id: str
    updated_at: datetime
    status: str


#: One tenant's response by id, built once: building the expression took longer than running it (SQLAlchemy
#: caches the compiled form, not the expression).
_RESPONSE_OF_TENANT = select(ResponseRow).where(
    ResponseRow.id == bindparam("response_id"), ResponseRow.tenant == bindparam("tenant")
)

#: The same row's updated_at alone: what a cached answer is checked against.
_VERSION_OF_TENANT = select(ResponseRow.updated_at).where(
    ResponseRow.id == bindparam("response_id"), ResponseRow.tenant == bindparam("tenant")
)


async def count_queued_background(session: AsyncSession, tenant: str) -> int:
    """The tenant's background responses still queued (ix_responses_tenant_status_background reads it)."""
    count = await session.scalar(
        select(func.count())
        .select_from(ResponseRow)
        .where(ResponseRow.tenant == tenant, ResponseRow.status == "queued", ResponseRow.background.is_(True))
    )
    return int(count or 0)


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


async def get_response_version(connection: AsyncConnection, response_id: str, tenant: str) -> datetime | None:
    """The tenant's response's updated_at (None: it has none of that id), as a Core read on `connection`."""
    result = await connection.execute(_VERSION_OF_TENANT, {"response_id": response_id, "tenant": tenant})
    return result.scalar_one_or_none()


async def get_prompt_cache_fingerprint(
    session: AsyncSession, response_id: str, tenant: str
) -> tuple[bool, dict[str, Any] | None]:
    """Whether the tenant has a response of that id, and its prompt-cache fingerprint (None: it has none)."""
    result = await session.execute(
        select(ResponseRow.prompt_cache_fingerprint).where(ResponseRow.id == response_id, ResponseRow.tenant == tenant)
    )
    row = result.one_or_none()
    return (False, None) if row is None else (True, row[0])


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


async def delete_response(session: AsyncSession, response_id: str, tenant: str) -> bool:
    owned = await get_response(session, response_id, tenant)
    if owned is None:
        return False
    await session.execute(delete(InputItemRow).where(InputItemRow.response_id == response_id))
    await session.execute(delete(ResponseRow).where(ResponseRow.id == response_id))
    return True


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


def _moment(unix_s: int) -> datetime:
    return datetime.fromtimestamp(unix_s, UTC)


def _metadata_matches(dialect: str, key: str, value: str) -> ColumnElement[bool]:
    """metadata[key] == value, with the key a bound parameter on either database, never part of a JSON path.

    NOTE: a JSON path cannot hold every key (on SQLite a `"` ends a quoted label; on Postgres `,`, `{` and `"`
    change a `#>` path), so the key is compared as a value: Postgres indexes with `->` by a bound key, SQLite
    reads the metadata object's members through json_each.
    """
    if dialect == "postgresql":
        matches: ColumnElement[bool] = ResponseRow.params["metadata"][key].as_string() == value
        return matches
    members = func.json_each(ResponseRow.params, "$.metadata").table_valued("key", "value")
    member: Select[tuple[int]] = select(literal_column("1")).select_from(members)
    member = member.where(members.c.key == key, members.c.value == value)
    return exists(member)


def _filtered(query: Query, tenant: str, filters: ResponseFilters, dialect: str) -> Query:
    """`query` narrowed to the tenant's responses that match `filters`."""
    query = query.where(ResponseRow.tenant == tenant)
    if filters.status is not None:
        query = query.where(ResponseRow.status == filters.status)
    if filters.model is not None:
        query = query.where(ResponseRow.model == filters.model)
    if filters.previous_response_id is not None:
        query = query.where(ResponseRow.previous_response_id == filters.previous_response_id)
    for key, value in filters.metadata.items():
        query = query.where(_metadata_matches(dialect, key, value))
    if filters.created_after is not None:
        query = query.where(ResponseRow.created_at >= _moment(filters.created_after))
    if filters.created_before is not None:
        query = query.where(ResponseRow.created_at < _moment(filters.created_before))
    return query


async def page_responses(
    session: AsyncSession,
    tenant: str,
    filters: ResponseFilters,
    *,
    limit: int,
    order: Literal["asc", "desc"],
    after: ResponseRow | None,
) -> tuple[list[ResponseRow], bool]:
    """One page of the tenant's responses matching `filters`, in `order` of creation, after the `after` row, and
    whether more follow."""
    query = _filtered(select(ResponseRow), tenant, filters, session.get_bind().dialect.name)
    return await page_by_creation(session, ResponseRow, query, limit=limit, order=order, after=after)


UNFILTERED = ResponseFilters()
_VERSION_COLUMNS = (ResponseRow.id, ResponseRow.updated_at, ResponseRow.status)
#: The unfiltered first page of versions (the list as clients poll it) in either order, built once: building the
#: expression was about a tenth of a cached list's CPU time (SQLAlchemy caches the compiled form, not the
#: expression).
_FIRST_PAGE_VERSIONS = {
    order: in_creation_order(
        ResponseRow, select(*_VERSION_COLUMNS).where(ResponseRow.tenant == bindparam("tenant")), order=order, after=None
    ).limit(bindparam("limit"))
    for order in ("asc", "desc")
}


async def page_response_versions(
    session: AsyncSession,
    tenant: str,
    filters: ResponseFilters,
    *,
    limit: int,
    order: Literal["asc", "desc"],
    after: ResponseRow | None,
) -> tuple[list[ResponseVersion], bool]:
    """page_responses' page as each row's id, updated_at and status alone (a Core read on the session's
    connection, no ORM object): enough to answer the rows whose JSON is cached, and to read the others."""
    connection = await session.connection()
    if after is None and filters == UNFILTERED:
        parameters = {"tenant": tenant, "limit": limit + 1}
        rows = [ResponseVersion(*row) for row in await connection.execute(_FIRST_PAGE_VERSIONS[order], parameters)]
        return rows[:limit], len(rows) > limit
    query = _filtered(select(*_VERSION_COLUMNS), tenant, filters, connection.dialect.name)
    query = in_creation_order(ResponseRow, query, order=order, after=after)
    rows = [ResponseVersion(*row) for row in await connection.execute(query.limit(limit + 1))]
    return rows[:limit], len(rows) > limit


async def get_responses(session: AsyncSession, tenant: str, response_ids: Collection[str]) -> list[ResponseRow]:
    """The tenant's responses of these ids that exist, in no particular order."""
    query = select(ResponseRow).where(ResponseRow.tenant == tenant, ResponseRow.id.in_(response_ids))
    return list((await session.execute(query)).scalars())
