"""An event's JSON text, encoded once: an event that arrived as JSON (from Redis) keeps that text, so relaying it
(an SSE frame) does not encode it again."""

from __future__ import annotations

import json
from typing import Any


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
    return event.text if type(event) is EncodedEvent else json.dumps(event, separators=(",", ":"))
