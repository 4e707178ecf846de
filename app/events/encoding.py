"""An event's payload and JSON text, each made once: an event that arrived as JSON (from Redis) keeps that text, so
relaying it (an SSE frame) does not encode it again; a text delta, one per token, skips pydantic's dump."""

from __future__ import annotations

import json
from typing import Any

from app.schemas.events import OutputTextDeltaEvent, ResponseEvent

#: json.dumps(event, separators=(",", ":")) without building an encoder per call (the same text).
_compact_json = json.JSONEncoder(separators=(",", ":")).encode


class EncodedEvent(dict[str, Any]):
    """An event with the JSON text it was decoded from. Read-only by convention: whoever changes an event makes a
    new dict (the relay renumbers that way), which has no text."""

    __slots__ = ("text",)

    text: str

    @classmethod
    def parse(cls, data: bytes | str) -> EncodedEvent:
        event = cls(json.loads(data))
        event.text = data.decode() if isinstance(data, bytes) else data
        return event


def event_json(event: dict[str, Any]) -> str:
    """The event as compact JSON (as every publisher encodes it): its own text when it came with one."""
    return event.text if type(event) is EncodedEvent else _compact_json(event)


def event_payload(event: ResponseEvent) -> dict[str, Any]:
    """`event.model_dump(mode="json")`, the same keys in the same order; a text delta without logprobs (the event
    of almost every token) is written out here, at a fifth of pydantic's cost."""
    if type(event) is OutputTextDeltaEvent and not event.logprobs:
        return {
            "type": event.type,
            "sequence_number": event.sequence_number,
            "item_id": event.item_id,
            "output_index": event.output_index,
            "content_index": event.content_index,
            "delta": event.delta,
            "logprobs": [],
        }
    return event.model_dump(mode="json")
