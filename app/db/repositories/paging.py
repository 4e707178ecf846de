"""Cursor paging by position, shared by every list of items (a response's input items, a conversation's)."""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute


async def page_by_position(
    session: AsyncSession,
    query: Select[tuple[dict[str, Any]]],
    position: InstrumentedAttribute[int],
    *,
    limit: int,
    order: Literal["asc", "desc"],
    after_position: int | None,
) -> tuple[list[dict[str, Any]], bool]:
    """One page of `query`'s items in `order` of `position`, after `after_position`, and whether more follow."""
    if order == "asc":
        if after_position is not None:
            query = query.where(position > after_position)
        query = query.order_by(position.asc())
    else:
        if after_position is not None:
            query = query.where(position < after_position)
        query = query.order_by(position.desc())
    rows = list((await session.execute(query.limit(limit + 1))).scalars())
    return rows[:limit], len(rows) > limit
