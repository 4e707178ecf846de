"""A page request of any list (limit, order, after cursor), as the list routes take it and the services read it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MAX_PAGE_LIMIT = 100


@dataclass(frozen=True, slots=True)
class PageRequest:
    limit: int = 20
    order: Literal["asc", "desc"] = "desc"
    #: The id of the last entry of the previous page; the page starts after it.
    after: str | None = None
