"""What every item shares on the wire: the ids a client may send, roles and item statuses."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

#: The length of every id column (responses, items, conversations).
MAX_ID_CHARS = 64


def _storable_id(value: str) -> str:
    if "\x00" in value:
        raise ValueError("an id cannot hold a NUL character")
    return value


#: An id a client sends (an item's, a response's, a conversation's): what every database's id columns can hold
#: and compare (Postgres refuses NUL in text), so that a lookup or an insert of it never fails.
ClientId = Annotated[str, Field(max_length=MAX_ID_CHARS), AfterValidator(_storable_id)]

Role = Literal["user", "assistant", "system", "developer"]
ItemStatus = Literal["in_progress", "completed", "incomplete"]
