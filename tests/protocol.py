"""Protocol assertions shared by every streaming test: a stream is well formed, and ends in what GET returns."""

from __future__ import annotations

from typing import Any

import httpx
from openai.types.responses import (
    FunctionTool,
    Response,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponsesServerEvent,
    ResponseStreamEvent,
    ResponseTextConfig,
    ResponseUsage,
)
from openai.types.responses.response_output_text import Logprob, LogprobTopLogprob
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import BaseModel, TypeAdapter

from app.events.terminal import SDK_TERMINAL_EVENT_TYPES, TERMINAL_EVENT_TYPES

STREAM_EVENT = TypeAdapter(ResponseStreamEvent)
#: What WebSocket mode sends: the stream events plus `stream_id`, and errors nested as ResponseWsError.
SOCKET_EVENT = TypeAdapter(ResponsesServerEvent)
#: How a stream that failed with a message open ends: the message closed (incomplete), `error`, then the failure.
FAILED_WITH_OPEN_MESSAGE = [
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "error",
    "response.failed",
]


def assert_well_formed_stream(
    events: list[dict[str, Any]], *, union: TypeAdapter[Any] = STREAM_EVENT
) -> dict[str, Any]:
    """Sequence numbers 0..n-1, created first, every added closed by its done, text and argument deltas adding
    up to their done events, exactly one terminal event and nothing after it, every event valid for the SDK.

    Returns the terminal event's response.
    """
    assert events, "empty stream"
    for event in events:
        # NOTE: `response.cancelled` is not in the SDK's event union; its response is checked alone.
        if event["type"] not in TERMINAL_EVENT_TYPES - SDK_TERMINAL_EVENT_TYPES:
            union.validate_python(event)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    response_id = events[0]["response"]["id"]
    open_items: dict[str, dict[str, Any]] = {}
    #: output_index -> the open item's id (the shell_call_command events name their item only so).
    at_index: dict[int, str] = {}
    open_parts: set[tuple[str, int]] = set()
    deltas: dict[tuple[str, int], str] = {}
    terminal = [index for index, event in enumerate(events) if event["type"] in TERMINAL_EVENT_TYPES]
    assert len(terminal) == 1 and terminal[0] == len(events) - 1, [event["type"] for event in events]
    for event in events:
        kind = event["type"]
        if "response" in event:
            assert event["response"]["id"] == response_id
        if kind == "response.output_item.added":
            open_items[event["item"]["id"]] = event["item"]
            at_index[event["output_index"]] = event["item"]["id"]
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
        elif kind in ("response.mcp_call_arguments.delta", "response.mcp_call_arguments.done"):
            assert open_items.get(event["item_id"], {}).get("type") == "mcp_call", "arguments before item"
            key = (event["item_id"], -1)
            if kind.endswith("delta"):
                deltas[key] = deltas.get(key, "") + event["delta"]
            else:
                assert deltas.get(key, "") == event["arguments"]
        elif kind.startswith("response.shell_call_command."):
            item_id = at_index.get(event["output_index"], "")
            assert open_items.get(item_id, {}).get("type") == "shell_call", f"{kind} outside its item"
            key = (item_id, -2 - event["command_index"])
            if kind.endswith("added"):
                assert key not in deltas and event["command"] == ""
                deltas[key] = ""
            elif kind.endswith("delta"):
                deltas[key] += event["delta"]
            else:
                assert deltas[key] == event["command"]
        elif kind.startswith("response.mcp_call.") or kind.startswith("response.mcp_list_tools."):
            item_type = "mcp_call" if kind.startswith("response.mcp_call.") else "mcp_list_tools"
            assert open_items.get(event["item_id"], {}).get("type") == item_type, f"{kind} outside its item"
        elif kind == "response.output_item.done":
            if event["item"]["type"] == "mcp_call":
                assert event["item"]["arguments"] == deltas.get((event["item"]["id"], -1), "")
                assert event["item"]["status"] in ("completed", "failed", "incomplete")
            if event["item"]["type"] == "function_call":
                assert event["item"]["arguments"] == deltas.get((event["item"]["id"], -1), "")
            if event["item"]["type"] == "custom_tool_call":
                assert event["item"]["input"] == deltas.get((event["item"]["id"], -1), "")
            if event["item"]["type"] == "shell_call":
                commands = event["item"]["action"]["commands"]
                assert commands == [deltas[(event["item"]["id"], -2 - index)] for index in range(len(commands))]
            assert event["item"]["id"] in open_items
            del open_items[event["item"]["id"]]
    assert not open_items and not open_parts, "items or parts left open"
    final: dict[str, Any] = events[-1]["response"]
    assert_exact_response(final)
    return final


#: SDK models whose every declared field must be on the wire (null where optional), minus fields for features
#: this server has no part in: the independent validators of the Responses API require these objects whole.
STRICT_MODELS: dict[type[BaseModel], frozenset[str]] = {
    Response: frozenset(),
    ResponseUsage: frozenset(),
    InputTokensDetails: frozenset({"cache_write_tokens_details"}),
    OutputTokensDetails: frozenset(),
    ResponseTextConfig: frozenset(),
    ResponseOutputMessage: frozenset({"phase"}),  # set only by models that separate commentary from answers
    ResponseOutputText: frozenset(),
    Logprob: frozenset(),
    LogprobTopLogprob: frozenset(),
    # Fields of hosted features (programmatic callers, deferred loading, async calls): not echoed.
    FunctionTool: frozenset({"allowed_callers", "async_", "defer_loading", "output_schema"}),
}


def _assert_declared_fields(parsed: Any, payload: Any, path: str) -> None:
    if isinstance(parsed, BaseModel):
        assert isinstance(payload, dict), path
        exempt = STRICT_MODELS.get(type(parsed))
        for name, field in type(parsed).model_fields.items():
            key = field.alias or name
            if exempt is not None and name not in exempt:
                assert key in payload, f"{path}.{key} is missing ({type(parsed).__name__} declares it)"
            if key in payload:
                _assert_declared_fields(getattr(parsed, name), payload[key], f"{path}.{key}")
    elif isinstance(parsed, list):
        assert isinstance(payload, list) and len(parsed) == len(payload), path
        for index, (item, raw) in enumerate(zip(parsed, payload, strict=True)):
            _assert_declared_fields(item, raw, f"{path}[{index}]")


def assert_exact_response(payload: dict[str, Any]) -> Response:
    """The payload is a Response as the SDK declares it, with every field present (not only the required ones:
    `Response.model_validate` alone is lenient) and `strict` booleans, `logprobs` lists where they are typed so."""
    parsed = Response.model_validate(payload)
    _assert_declared_fields(parsed, payload, "response")
    assert isinstance(payload["presence_penalty"], float | int) and isinstance(
        payload["frequency_penalty"], float | int
    )
    for tool in payload["tools"]:
        if tool["type"] == "function":
            assert isinstance(tool["strict"], bool), tool
    for item in payload["output"]:
        for part in item.get("content") or []:
            if part["type"] == "output_text":
                assert isinstance(part["logprobs"], list), part
    return parsed


def socket_exchange(connection: Any, **fields: Any) -> list[dict[str, Any]]:
    """Send one response.create on an SDK WebSocket connection; the events that answer it, as sent."""
    connection.response.create(**fields)
    events: list[dict[str, Any]] = []
    for event in connection:
        events.append(event.model_dump(mode="json", exclude_unset=True, warnings=False))
        if event.type in SDK_TERMINAL_EVENT_TYPES or (event.type == "error" and event.sequence_number is None):
            return events
    raise AssertionError("the connection closed before the response ended")


def assert_error(reply: httpx.Response, status: int, *, param: str | None, code: str | None = None) -> dict:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    return error


#: The running response is asked to write far more than this cap and is steered at its first text delta: whatever
#: the machine's speed, the steer lands long before the cap could end it (or the model stop on its own).
STEERED_CAP = 256
LONG_COUNT = "Count from 1 to 500, separated by commas."


def steered_exchange(connection: Any, steering: str, **fields: Any) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """Start a response on an SDK WebSocket connection, steer it at its first text delta, and read on to the end
    of the automatic successor: (the steering events, the steered response, the successor), both streams checked."""
    connection.response.create(**fields)
    streams: list[list[dict[str, Any]]] = [[]]
    steering_events: list[Any] = []
    steer_sent = False  # once: its acceptance may come after more deltas
    for event in connection:
        if event.type.startswith("response.steer"):
            steering_events.append(event)
            continue
        streams[-1].append(event.model_dump(mode="json", exclude_unset=True, warnings=False))
        if event.type == "response.output_text.delta" and not steer_sent:
            connection.response.steer(previous_response_id=streams[0][0]["response"]["id"], input=steering)
            steer_sent = True
        if event.type in SDK_TERMINAL_EVENT_TYPES:
            if len(streams) == 2:
                break
            streams.append([])
        assert event.type != "error", event
    steered, successor = (assert_well_formed_stream(stream, union=SOCKET_EVENT) for stream in streams)
    return steering_events, steered, successor


def branching_lanes_exchange(
    connection: Any, origin: str, *, long: dict[str, Any], short: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Two lanes of one SDK WebSocket connection side by side, each branching from the response `origin`: the
    `long` create on lane "long", then, at its first text delta, the `short` one on lane "short"; read both to
    their ends: (the long response, the short one, the lanes in the order their responses ended)."""
    connection.response.create(stream_id="long", previous_response_id=origin, **long)
    streams: dict[str, list[dict[str, Any]]] = {"long": [], "short": []}
    ended: list[str] = []
    short_sent = False
    for event in connection:
        payload = event.model_dump(mode="json", exclude_unset=True, warnings=False)
        assert event.type != "error", payload
        lane = payload["stream_id"]
        streams[lane].append(payload)
        if event.type == "response.output_text.delta" and lane == "long" and not short_sent:
            connection.response.create(stream_id="short", previous_response_id=origin, **short)
            short_sent = True
        if event.type in SDK_TERMINAL_EVENT_TYPES:
            ended.append(lane)
            if len(ended) == 2:
                break
    long_response, short_response = (
        assert_well_formed_stream(streams[lane], union=SOCKET_EVENT) for lane in ("long", "short")
    )
    return long_response, short_response, ended
