"""How a response ends, in one place: the terminal statuses, the terminal event types, and the terminal event a
stored, ended response stands for."""

from __future__ import annotations

from typing import Any

from app.events.snapshot import StoredResponse, response_from_row
from app.schemas.events import ResponseLifecycleEvent

#: A response in one of these has ended: nothing will change it again but a delete.
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "incomplete", "failed", "cancelled"})
#: The event that ends a response's stream: `response.` + its terminal status.
# NOTE: `response.cancelled` is not in the SDK's event union; it ends the stream of a cancelled background response.
TERMINAL_EVENT_TYPES: frozenset[str] = frozenset(f"response.{status}" for status in TERMINAL_STATUSES)
#: The terminal event types of the SDK's stream event union (all but `response.cancelled`).
SDK_TERMINAL_EVENT_TYPES: frozenset[str] = TERMINAL_EVENT_TYPES - {"response.cancelled"}


def is_terminal(event: dict[str, Any]) -> bool:
    return event["type"] in TERMINAL_EVENT_TYPES


def terminal_event(row: StoredResponse, sequence_number: int) -> dict[str, Any]:
    """The terminal event that a stored, ended response stands for."""
    event = ResponseLifecycleEvent(
        type=f"response.{row.status}", sequence_number=sequence_number, response=response_from_row(row)
    )
    return event.model_dump(mode="json")
