"""Protocol assertions shared by every streaming test: a stream is well formed, and ends in what GET returns."""

from __future__ import annotations

import json
from typing import Any

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

STREAM_EVENT = TypeAdapter(ResponseStreamEvent)
TERMINAL_EVENTS = {"response.completed", "response.incomplete", "response.failed"}


def parse_sse(body: str) -> list[dict[str, Any]]:
    """SSE text -> event payloads; checks that each `event:` line names its payload's type."""
    events = []
    for frame in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if lines.get("data") == "[DONE]":
            continue
        payload = json.loads(lines["data"])
        assert lines["event"] == payload["type"], frame
        events.append(payload)
    return events


def assert_well_formed_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Sequence numbers 0..n-1, created first, every added closed by its done, text and argument deltas adding
    up to their done events, exactly one terminal event and nothing after it, every event valid for the SDK.

    Returns the terminal event's response.
    """
    assert events, "empty stream"
    for event in events:
        STREAM_EVENT.validate_python(event)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    response_id = events[0]["response"]["id"]
    open_items: dict[str, dict[str, Any]] = {}
    open_parts: set[tuple[str, int]] = set()
    deltas: dict[tuple[str, int], str] = {}
    terminal = [index for index, event in enumerate(events) if event["type"] in TERMINAL_EVENTS]
    assert len(terminal) == 1 and terminal[0] == len(events) - 1, [event["type"] for event in events]
    for event in events:
        kind = event["type"]
        if "response" in event:
            assert event["response"]["id"] == response_id
        if kind == "response.output_item.added":
            open_items[event["item"]["id"]] = event["item"]
        elif kind == "response.content_part.added":
            assert event["item_id"] in open_items
            open_parts.add((event["item_id"], event["content_index"]))
            deltas[(event["item_id"], event["content_index"])] = ""
        elif kind == "response.output_text.delta":
            key = (event["item_id"], event["content_index"])
            assert key in open_parts, "delta before content_part.added"
            deltas[key] += event["delta"]
        elif kind == "response.output_text.done":
            assert deltas[(event["item_id"], event["content_index"])] == event["text"]
        elif kind == "response.content_part.done":
            key = (event["item_id"], event["content_index"])
            assert key in open_parts
            assert event["part"]["text"] == deltas[key]
            open_parts.remove(key)
        elif kind == "response.reasoning_text.delta":
            assert open_items.get(event["item_id"], {}).get("type") == "reasoning", "reasoning before its item"
            key = (event["item_id"], event["content_index"])
            deltas[key] = deltas.get(key, "") + event["delta"]
        elif kind == "response.reasoning_text.done":
            assert deltas.get((event["item_id"], event["content_index"]), "") == event["text"]
        elif kind == "response.custom_tool_call_input.delta":
            assert open_items.get(event["item_id"], {}).get("type") == "custom_tool_call", "input before item"
            deltas[(event["item_id"], -1)] = deltas.get((event["item_id"], -1), "") + event["delta"]
        elif kind == "response.custom_tool_call_input.done":
            assert deltas.get((event["item_id"], -1), "") == event["input"]
        elif kind == "response.function_call_arguments.delta":
            assert open_items.get(event["item_id"], {}).get("type") == "function_call", "arguments before item"
            deltas[(event["item_id"], -1)] = deltas.get((event["item_id"], -1), "") + event["delta"]
        elif kind == "response.function_call_arguments.done":
            assert deltas.get((event["item_id"], -1), "") == event["arguments"]
        elif kind == "response.output_item.done":
            if event["item"]["type"] == "function_call":
                assert event["item"]["arguments"] == deltas.get((event["item"]["id"], -1), "")
            if event["item"]["type"] == "custom_tool_call":
                assert event["item"]["input"] == deltas.get((event["item"]["id"], -1), "")
            assert event["item"]["id"] in open_items
            del open_items[event["item"]["id"]]
    assert not open_items and not open_parts, "items or parts left open"
    final: dict[str, Any] = events[-1]["response"]
    Response.model_validate(final)
    return final
