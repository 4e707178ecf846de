"""The model's client tool calls as output items (function and custom tool calls), and the stream events of each:
`output_item.added`, its arguments (or input) in one delta and done, `output_item.done`."""

from __future__ import annotations

from collections.abc import Callable

from app.generation.tool_calls import ParsedCall
from app.schemas.events import (
    CustomToolCallInputDeltaEvent,
    CustomToolCallInputDoneEvent,
    FunctionCallArgumentsDeltaEvent,
    FunctionCallArgumentsDoneEvent,
    OutputItemEvent,
    ResponseEvent,
)
from app.schemas.items import Item, StoredCustomToolCall, StoredFunctionCall

ClientCall = StoredFunctionCall | StoredCustomToolCall
Number = Callable[[], int]


def call_items(
    parsed: list[ParsedCall],
    functions: dict[str, str | None],
    custom_tools: set[str],
    ids: Callable[[str], str],
) -> list[ClientCall]:
    """Each parsed call as the item of its tool's kind; `functions` maps each name to its namespace."""
    calls: list[ClientCall] = []
    for call in parsed:
        namespace = functions[call.name]
        if call.name in custom_tools:
            # NOTE: a custom tool call has no status on the wire; a cut one is known by its response's.
            calls.append(
                StoredCustomToolCall(
                    id=ids("ctc"), call_id=ids("call"), name=call.name, input=call.arguments, namespace=namespace
                )
            )
        else:
            calls.append(
                StoredFunctionCall(
                    id=ids("fc"),
                    call_id=ids("call"),
                    name=call.name,
                    arguments=call.arguments,
                    namespace=namespace,
                    status="completed" if call.complete else "incomplete",
                )
            )
    return calls


def call_events(call: ClientCall, index: int, number: Number) -> list[ResponseEvent]:
    """One call, whole: opened empty, its arguments (or input) in one delta and done, closed."""
    custom = isinstance(call, StoredCustomToolCall)
    opening: Item = (
        call.model_copy(update={"input": ""})
        if custom
        else call.model_copy(update={"arguments": "", "status": "in_progress"})
    )
    events: list[ResponseEvent] = [
        OutputItemEvent(type="response.output_item.added", sequence_number=number(), output_index=index, item=opening)
    ]
    if isinstance(call, StoredCustomToolCall):
        if call.input:
            events.append(
                CustomToolCallInputDeltaEvent(
                    sequence_number=number(), item_id=call.id, output_index=index, delta=call.input
                )
            )
        events.append(
            CustomToolCallInputDoneEvent(
                sequence_number=number(), item_id=call.id, output_index=index, input=call.input
            )
        )
    else:
        if call.arguments:
            events.append(
                FunctionCallArgumentsDeltaEvent(
                    sequence_number=number(), item_id=call.id, output_index=index, delta=call.arguments
                )
            )
        events.append(
            FunctionCallArgumentsDoneEvent(
                sequence_number=number(), item_id=call.id, output_index=index, arguments=call.arguments
            )
        )
    events.append(
        OutputItemEvent(type="response.output_item.done", sequence_number=number(), output_index=index, item=call)
    )
    return events
