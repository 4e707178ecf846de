"""The stream events of MCP items (the SDK's `response.mcp_list_tools.*`, `response.mcp_call.*` and
`response.mcp_call_arguments.*`), each item between its `output_item.added` and `output_item.done`."""

from __future__ import annotations

from collections.abc import Callable

from app.events import hosted_calls
from app.events.hosted_calls import HOSTED_ID_PREFIXES, is_hosted
from app.schemas.events import (
    McpCallArgumentsDeltaEvent,
    McpCallArgumentsDoneEvent,
    McpItemEvent,
    OutputItemEvent,
    ResponseEvent,
)
from app.schemas.items import Item, StoredMcpApprovalRequest, StoredMcpCall, StoredMcpListTools
from app.schemas.tools import hosted_tool_of

Number = Callable[[], int]


def _item(
    kind: str, item: StoredMcpCall | StoredMcpListTools | StoredMcpApprovalRequest, index: int, number: Number
) -> OutputItemEvent:
    return OutputItemEvent(type=f"response.output_item.{kind}", sequence_number=number(), output_index=index, item=item)


def _progress(kind: str, item_id: str, index: int, number: Number) -> McpItemEvent:
    return McpItemEvent(type=kind, sequence_number=number(), item_id=item_id, output_index=index)


def list_tools_events(item: StoredMcpListTools, index: int, number: Number) -> list[ResponseEvent]:
    """A listing, whole: added (no tools yet), in progress, completed or failed, done."""
    end = "failed" if item.error is not None else "completed"
    return [
        _item("added", item.model_copy(update={"tools": [], "error": None}), index, number),
        _progress("response.mcp_list_tools.in_progress", item.id, index, number),
        _progress(f"response.mcp_list_tools.{end}", item.id, index, number),
        _item("done", item, index, number),
    ]


def open_tool_calls(
    wanted: list[dict[str, str]], approvals: set[str], index: int, number: Number, ids: Callable[[str], str]
) -> tuple[list[StoredMcpCall | StoredMcpApprovalRequest], list[ResponseEvent]]:
    """MCP calls ({name, arguments, server_label, approval_request_id?}) from output index `index` on: each
    call open (call_opening_events), or, for a tool in `approvals` not approved yet, an mcp_approval_request
    instead, whole (added and done: the hosted API sends no other events for it)."""
    items: list[StoredMcpCall | StoredMcpApprovalRequest] = []
    events: list[ResponseEvent] = []
    for offset, call in enumerate(wanted, start=index):
        if call["name"] in approvals and "approval_request_id" not in call:
            request = StoredMcpApprovalRequest(id=ids("mcpr"), **call)
            items.append(request)
            events += [_item("added", request, offset, number), _item("done", request, offset, number)]
            continue
        hosted = hosted_tool_of(call["server_label"])
        # A hosted call's id is its item's (fs_..., ws_... as hosted's are).
        opened = StoredMcpCall(id=ids(HOSTED_ID_PREFIXES.get(hosted or "", "mcp")), status="in_progress", **call)
        items.append(opened)
        events += (hosted_calls.opening_events if is_hosted(opened) else call_opening_events)(opened, offset, number)
    return items, events


def call_opening_events(call: StoredMcpCall, index: int, number: Number) -> list[ResponseEvent]:
    """A call the model made, up to the moment it is sent to its server: added, its arguments, in progress."""
    events: list[ResponseEvent] = [
        _item("added", call.model_copy(update={"arguments": "", "status": "in_progress"}), index, number)
    ]
    if call.arguments:
        events.append(
            McpCallArgumentsDeltaEvent(
                sequence_number=number(), item_id=call.id, output_index=index, delta=call.arguments
            )
        )
    events.append(
        McpCallArgumentsDoneEvent(
            sequence_number=number(), item_id=call.id, output_index=index, arguments=call.arguments
        )
    )
    events.append(_progress("response.mcp_call.in_progress", call.id, index, number))
    return events


def call_closing_events(call: StoredMcpCall, index: int, number: Number) -> list[ResponseEvent]:
    """A call's end: completed (its output) or failed (its error), then done (a hosted call's: its own events)."""
    if is_hosted(call):
        return hosted_calls.closing_events(call, index, number)
    end = "completed" if call.status == "completed" else "failed"
    return [_progress(f"response.mcp_call.{end}", call.id, index, number), _item("done", call, index, number)]


def failed_call(call: StoredMcpCall, message: str, *, execution: bool = False) -> StoredMcpCall:
    """`call` failed: the tool's own error (`execution`), else the exchange with its server."""
    error = (
        {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": message}]}
        if execution
        else {"type": "mcp_protocol_error", "code": -32000, "message": message}
    )
    return call.model_copy(update={"status": "failed", "error": error, "output": None})


def close_open_calls(leading: list[Item], number: Number) -> list[ResponseEvent]:
    """The response ends while calls in `leading` (its output items so far) are open (a worker died during them):
    they end `incomplete`, in place."""
    events: list[ResponseEvent] = []
    for index, item in enumerate(leading):
        if isinstance(item, StoredMcpCall) and item.status == "in_progress":
            leading[index] = closed = item.model_copy(update={"status": "incomplete"})
            events += call_closing_events(closed, index, number)
    return events
