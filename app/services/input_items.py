"""GET /v1/responses/{id}/input_items: one page of the items a stored request gave."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import TypeAdapter
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.repositories import responses as repository
from app.errors import InvalidRequest, response_not_found
from app.schemas.items import Item, ItemList
from app.schemas.paging import PageRequest
from app.schemas.responses import InputItemList
from app.services.includes import with_includes

STORED_ITEM: TypeAdapter[Item] = TypeAdapter(Item)
PageT = TypeVar("PageT", bound=ItemList)


def item_page(page_type: type[PageT], rows: list[dict[str, Any]], has_more: bool, includes: frozenset[str]) -> PageT:
    """A page of stored items as the client reads it, with the cursor ids of its ends."""
    data = with_includes([STORED_ITEM.validate_python(row) for row in rows], includes)
    return page_type(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=has_more,
    )


async def list_input_items(
    session: AsyncSession,
    response_id: str,
    tenant: str,
    page: PageRequest,
    *,
    includes: frozenset[str] = frozenset(),
) -> InputItemList:
    if await repository.get_response(session, response_id, tenant) is None:
        raise response_not_found(response_id)
    after_position = None
    if page.after is not None:
        after_position = await repository.find_item_position(session, response_id, page.after)
        if after_position is None:
            raise InvalidRequest(
                f"Invalid 'after': no input item '{page.after}' in response '{response_id}'.",
                param="after",
                code="invalid_value",
            )
    rows, has_more = await repository.page_input_items(
        session, response_id, limit=page.limit, order=page.order, after_position=after_position
    )
    return item_page(InputItemList, rows, has_more, includes)
