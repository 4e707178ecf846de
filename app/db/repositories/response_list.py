"""The query behind GET /v1/responses: one tenant's responses, filtered, a page at a time by (created_at, id)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from sqlalchemy import ColumnElement, Select, and_, exists, func, literal_column, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import ResponseRow
from app.schemas.response_list import ResponseFilters


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
    query = select(ResponseRow).where(ResponseRow.tenant == tenant)
    if filters.status is not None:
        query = query.where(ResponseRow.status == filters.status)
    if filters.model is not None:
        query = query.where(ResponseRow.model == filters.model)
    if filters.previous_response_id is not None:
        query = query.where(ResponseRow.previous_response_id == filters.previous_response_id)
    dialect = session.get_bind().dialect.name
    for key, value in filters.metadata.items():
        query = query.where(_metadata_matches(dialect, key, value))
    if filters.created_after is not None:
        query = query.where(ResponseRow.created_at >= _moment(filters.created_after))
    if filters.created_before is not None:
        query = query.where(ResponseRow.created_at < _moment(filters.created_before))
    # Ties on created_at are broken by id, so that a cursor never skips nor repeats a response.
    if order == "desc":
        if after is not None:
            query = query.where(
                or_(
                    ResponseRow.created_at < after.created_at,
                    and_(ResponseRow.created_at == after.created_at, ResponseRow.id < after.id),
                )
            )
        query = query.order_by(ResponseRow.created_at.desc(), ResponseRow.id.desc())
    else:
        if after is not None:
            query = query.where(
                or_(
                    ResponseRow.created_at > after.created_at,
                    and_(ResponseRow.created_at == after.created_at, ResponseRow.id > after.id),
                )
            )
        query = query.order_by(ResponseRow.created_at.asc(), ResponseRow.id.asc())
    rows = list((await session.execute(query.limit(limit + 1))).scalars())
    return rows[:limit], len(rows) > limit
