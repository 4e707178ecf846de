"""The paging query parameters every list route takes (limit, order, after), checked once."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends

from app.errors import InvalidRequest
from app.schemas.paging import MAX_PAGE_LIMIT, PageRequest


def page_request(limit: int, order: Literal["asc", "desc"], after: str | None) -> PageRequest:
    """A checked page request (the operator CLI checks its options with it too)."""
    if not 1 <= limit <= MAX_PAGE_LIMIT:
        raise InvalidRequest(
            f"Invalid 'limit': {limit}. It must be between 1 and {MAX_PAGE_LIMIT}.",
            param="limit",
            code="invalid_value",
        )
    return PageRequest(limit=limit, order=order, after=after)


async def get_page(limit: int = 20, order: Literal["asc", "desc"] = "desc", after: str | None = None) -> PageRequest:
    return page_request(limit, order, after)


PageDep = Annotated[PageRequest, Depends(get_page)]
