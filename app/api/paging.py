"""The paging query parameters every list route takes (limit, order, after), checked once."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends

from app.errors import InvalidRequest
from app.schemas.paging import MAX_PAGE_LIMIT, PageRequest


async def get_page(limit: int = 20, order: Literal["asc", "desc"] = "desc", after: str | None = None) -> PageRequest:
    if not 1 <= limit <= MAX_PAGE_LIMIT:
        raise InvalidRequest(
            f"Invalid 'limit': {limit}. It must be between 1 and {MAX_PAGE_LIMIT}.",
            param="limit",
            code="invalid_value",
        )
    return PageRequest(limit=limit, order=order, after=after)


PageDep = Annotated[PageRequest, Depends(get_page)]
