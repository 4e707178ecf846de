"""A page request of any list (limit, order, after cursor), and the one way every list reads it: the `after` id
found (an unknown one is a 400), one page after it, and the page's ends as the SDK's cursor pages carry them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel

from app.errors import InvalidRequest

MAX_PAGE_LIMIT = 100

Cursor = TypeVar("Cursor")
Entry = TypeVar("Entry")
PageT = TypeVar("PageT", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class PageRequest:
    limit: int = 20
    order: Literal["asc", "desc"] = "desc"
    #: The id of the last entry of the previous page; the page starts after it.
    after: str | None = None


def page_request(limit: int, order: Literal["asc", "desc"], after: str | None) -> PageRequest:
    """A checked page request (the operator CLI checks its options with it too)."""
    if not 1 <= limit <= MAX_PAGE_LIMIT:
        raise InvalidRequest(
            f"Invalid 'limit': {limit}. It must be between 1 and {MAX_PAGE_LIMIT}.",
            param="limit",
            code="invalid_value",
        )
    return PageRequest(limit=limit, order=order, after=after)


class Identified(Protocol):
    @property
    def id(self) -> str: ...


async def page_after(
    page: PageRequest,
    locate: Callable[[str], Awaitable[Cursor | None]],
    fetch: Callable[[Cursor | None], Awaitable[tuple[list[Entry], bool]]],
    *,
    unknown_after: Callable[[str], str],
) -> tuple[list[Entry], bool]:
    """One page after `page.after` (whose position `locate` finds): its entries and whether more follow. An
    `after` that names nothing is a 400 saying `unknown_after(after)`."""
    cursor: Cursor | None = None
    if page.after is not None:
        cursor = await locate(page.after)
        if cursor is None:
            raise InvalidRequest(unknown_after(page.after), param="after", code="invalid_value")
    return await fetch(cursor)


def cursor_page(page_type: type[PageT], data: Sequence[Identified], has_more: bool, **fields: Any) -> PageT:
    """A page as the SDK reads it: its entries, the ids of its ends (the next page's cursor), whether more follow."""
    return page_type(
        data=list(data),
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=has_more,
        **fields,
    )
