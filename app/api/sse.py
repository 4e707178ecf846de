"""Server-sent events: event -> frame, and a response that closes its source however the client leaves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Send

from app.events.encoding import event_json

DONE_FRAME = b"data: [DONE]\n\n"


def event_frame(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {event_json(event)}\n\n".encode()


async def _frames(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for event in events:
        yield event_frame(event)
    yield DONE_FRAME


class EventStreamResponse(StreamingResponse):
    """Streams events as SSE and always closes the event source, so a departed client's generation stops."""

    def __init__(self, events: AsyncIterator[dict[str, Any]], headers: dict[str, str] | None = None) -> None:
        self._events = events
        super().__init__(
            _frames(events),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})},
        )

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        finally:
            with anyio.CancelScope(shield=True):
                aclose = getattr(self._events, "aclose", None)
                if aclose is not None:
                    await aclose()
