"""Keyset paging in order of creation, the one way every list of rows is paged: after a cursor row, ties on
`created_at` broken by `id`, so that a cursor never skips nor repeats a row however many share a moment."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from sqlalchemy import Select, and_, or_
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import (
    BatchRow,
    FileRow,
    ResponseRow,
    VectorStoreFileRow,
    VectorStoreRow,
    WebhookDeliveryRow,
    WebhookEndpointRow,
)

#: The tables listed by creation (each has a creation moment and a unique id); one more is added here.
Row = TypeVar(
    "Row", ResponseRow, FileRow, BatchRow, WebhookEndpointRow, WebhookDeliveryRow, VectorStoreRow, VectorStoreFileRow
)


#: Any select over one of those tables: its rows, or some of their columns.
Query = TypeVar("Query", bound=Select[*tuple[Any, ...]])


def in_creation_order(model: type[Row], query: Query, *, order: Literal["asc", "desc"], after: Row | None) -> Query:
    """`query` (over `model`'s table) in `order` of creation, after the `after` row."""
    if order == "desc":
        if after is not None:
            query = query.where(
                or_(
                    model.created_at < after.created_at,
                    and_(model.created_at == after.created_at, model.id < after.id),
                )
            )
        return query.order_by(model.created_at.desc(), model.id.desc())
    if after is not None:
        query = query.where(
            or_(
                model.created_at > after.created_at,
                and_(model.created_at == after.created_at, model.id > after.id),
            )
        )
    return query.order_by(model.created_at.asc(), model.id.asc())


async def page_by_creation(
    session: AsyncSession,
    model: type[Row],
    query: Select[Row],
    *,
    limit: int,
    order: Literal["asc", "desc"],
    after: Row | None,
) -> tuple[list[Row], bool]:
    """One page of `query` (rows of `model`) in `order` of creation after the `after` row, and whether more
    follow."""
    query = in_creation_order(model, query, order=order, after=after)
    rows = list((await session.execute(query.limit(limit + 1))).scalars())
    return rows[:limit], len(rows) > limit
