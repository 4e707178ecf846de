"""The paging query parameters every list route takes (limit, order, after; or, where a list has no order, limit
and after, newest first), checked once."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends

from app.schemas.paging import PageRequest, page_request


async def get_page(limit: int = 20, order: Literal["asc", "desc"] = "desc", after: str | None = None) -> PageRequest:
    return page_request(limit, order, after)


PageDep = Annotated[PageRequest, Depends(get_page)]


async def get_newest_first_page(limit: int = 20, after: str | None = None) -> PageRequest:
    """A list without `order` (the SDK's batches.list): `after` and `limit`, newest first."""
    return page_request(limit, "desc", after)


NewestFirstPageDep = Annotated[PageRequest, Depends(get_newest_first_page)]
