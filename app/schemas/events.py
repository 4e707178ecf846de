"""Streaming events, as the openai SDK's `ResponseStreamEvent` union defines them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.schemas.items import Item, OutputText
from app.schemas.responses import ResponseObject


class ResponseEvent(BaseModel):
    type: str
    sequence_number: int


class ResponseLifecycleEvent(ResponseEvent):
    """response.created / queued / in_progress / completed / incomplete / failed / cancelled."""

    response: ResponseObject


class OutputItemEvent(ResponseEvent):
    """response.output_item.added / done."""

    output_index: int
    item: Item


class ContentPartEvent(ResponseEvent):
    """response.content_part.added / done."""

    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class EventTopLogprob(BaseModel):
    token: str
    logprob: float


class EventLogprob(BaseModel):
    """A token's logprob on a text delta or done event (the SDK's shape there has no `bytes`)."""

    token: str
    logprob: float
    top_logprobs: list[EventTopLogprob] = Field(default_factory=list)


class OutputTextDeltaEvent(ResponseEvent):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[EventLogprob] = Field(default_factory=list)


class OutputTextDoneEvent(ResponseEvent):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[EventLogprob] = Field(default_factory=list)


class FunctionCallArgumentsDeltaEvent(ResponseEvent):
    type: Literal["response.function_call_arguments.delta"] = "response.function_call_arguments.delta"
    item_id: str
    output_index: int
    delta: str


class FunctionCallArgumentsDoneEvent(ResponseEvent):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    item_id: str
    output_index: int
    arguments: str


class CustomToolCallInputDeltaEvent(ResponseEvent):
    type: Literal["response.custom_tool_call_input.delta"] = "response.custom_tool_call_input.delta"
    item_id: str
    output_index: int
    delta: str


class CustomToolCallInputDoneEvent(ResponseEvent):
    type: Literal["response.custom_tool_call_input.done"] = "response.custom_tool_call_input.done"
    item_id: str
    output_index: int
    input: str


class ReasoningTextDeltaEvent(ResponseEvent):
    type: Literal["response.reasoning_text.delta"] = "response.reasoning_text.delta"
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ReasoningTextDoneEvent(ResponseEvent):
    type: Literal["response.reasoning_text.done"] = "response.reasoning_text.done"
    item_id: str
    output_index: int
    content_index: int
    text: str


class ErrorEvent(ResponseEvent):
    """A mid-stream error: flat fields, no nested `error` key (the SDK raises on that)."""

    type: Literal["error"] = "error"
    code: str | None
    message: str
    param: str | None = None


class McpItemEvent(ResponseEvent):
    """response.mcp_list_tools.in_progress / completed / failed and response.mcp_call.in_progress / completed /
    failed: an MCP item's progress."""

    item_id: str
    output_index: int


class McpCallArgumentsDeltaEvent(ResponseEvent):
    type: Literal["response.mcp_call_arguments.delta"] = "response.mcp_call_arguments.delta"
    item_id: str
    output_index: int
    delta: str


class McpCallArgumentsDoneEvent(ResponseEvent):
    type: Literal["response.mcp_call_arguments.done"] = "response.mcp_call_arguments.done"
    item_id: str
    output_index: int
    arguments: str


class CompactionCompactingEvent(ResponseEvent):
    """The summary of a compaction_trigger's compaction item was sampled (it carries no summary)."""

    type: Literal["response.compaction.compacting"] = "response.compaction.compacting"
    item_id: str
    output_index: int


class ShellCallCommandEvent(ResponseEvent):
    """response.shell_call_command.added / done: one of a shell_call's commands (empty on added, whole on done).
    NOTE: the SDK's shell command events carry no item_id; output_index names the item."""

    output_index: int
    command_index: int
    command: str


class ShellCallCommandDeltaEvent(ResponseEvent):
    type: Literal["response.shell_call_command.delta"] = "response.shell_call_command.delta"
    output_index: int
    command_index: int
    delta: str


class HostedCallEvent(ResponseEvent):
    """response.file_search_call.in_progress / searching / completed and response.web_search_call.in_progress /
    searching / completed: a hosted tool call's progress."""

    item_id: str
    output_index: int


class AnnotationAddedEvent(ResponseEvent):
    """A citation on a message's output_text (file_citation, url_citation), before its text's `done`."""

    type: Literal["response.output_text.annotation.added"] = "response.output_text.annotation.added"
    item_id: str
    output_index: int
    content_index: int
    annotation_index: int
    annotation: dict[str, Any]
