"""A page of an owner's stored items (a response's input items, a conversation's items), as the client reads it:
after the `after` item, with what `include` adds."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from app.items import repository
from app.items.includes import with_includes
from app.items.repository import ItemTable
from app.schemas.items import STORED_ITEM, ItemList
from app.schemas.paging import PageRequest, cursor_page, page_after

ListT = TypeVar("ListT", bound=ItemList)


async def stored_item_page(
    session: AsyncSession,
    table: ItemTable,
    owner_id: str,
    page: PageRequest,
    page_type: type[ListT],
    *,
    includes: frozenset[str],
    unknown_after: Callable[[str], str],
) -> ListT:
    """One page of the items `owner_id` keeps in `table`; an `after` it does not hold is a 400 saying
    `unknown_after(after)`."""
    rows, has_more = await page_after(
        page,
        partial(repository.item_position, session, table, owner_id),
        lambda after_position: repository.item_page(
            session, table, owner_id, limit=page.limit, order=page.order, after_position=after_position
        ),
        unknown_after=unknown_after,
    )
    data = with_includes([STORED_ITEM.validate_python(row) for row in rows], includes)
    return cursor_page(page_type, data, has_more)
