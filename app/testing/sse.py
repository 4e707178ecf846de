"""Server-sent events as a client reads them: the frames of a body -> the events they carry."""

from __future__ import annotations

import json
from typing import Any


def parse_sse(body: str) -> list[dict[str, Any]]:
    """SSE text -> event payloads, checking that each `event:` line names its payload's type."""
    events = []
    for frame in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if lines.get("data") == "[DONE]":
            continue
        payload = json.loads(lines["data"])
        if lines["event"] != payload["type"]:
            raise ValueError(f"an SSE frame's event line does not name its payload's type: {frame}")
        events.append(payload)
    return events
