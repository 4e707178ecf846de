"""The model's client tool calls as output items (function and custom tool calls, and the calls of client-executed
tool types: shell_call, local_shell_call, apply_patch_call, tool_search_call), and the stream events of each:
`output_item.added`, its arguments (or input, or a shell call's commands) in one delta and done,
`output_item.done`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from app.generation.tool_calls import ParsedCall
from app.schemas.client_tool_items import (
    ApplyPatchOperation,
    LocalShellAction,
    ShellAction,
    StoredApplyPatchCall,
    StoredLocalShellCall,
    StoredShellCall,
    StoredToolSearchCall,
)
from app.schemas.events import (
    CustomToolCallInputDeltaEvent,
    CustomToolCallInputDoneEvent,
    FunctionCallArgumentsDeltaEvent,
    FunctionCallArgumentsDoneEvent,
    OutputItemEvent,
    ResponseEvent,
    ShellCallCommandDeltaEvent,
    ShellCallCommandEvent,
)
from app.schemas.items import Item, StoredCustomToolCall, StoredFunctionCall

ToolTypeCall = StoredShellCall | StoredLocalShellCall | StoredApplyPatchCall | StoredToolSearchCall
ClientCall = StoredFunctionCall | StoredCustomToolCall | ToolTypeCall
Number = Callable[[], int]


def tool_type_call(call: ParsedCall, ids: Callable[[str], str]) -> ToolTypeCall | None:
    """The call of a client-executed tool type (named after its type) as that type's item; None for an
    apply_patch call a cut left without its operation (the others say `incomplete`)."""
    arguments: dict[str, Any] = {}
    if call.complete:
        arguments = json.loads(call.arguments)  # held to CLIENT_TOOL_PARAMETERS by the assembler
    status = "completed" if call.complete else "incomplete"
    if call.name == "shell":
        action = ShellAction(commands=arguments.get("commands", []), timeout_ms=arguments.get("timeout_ms"))
        return StoredShellCall(id=ids("sh"), call_id=ids("call"), action=action, status=status)
    if call.name == "local_shell":
        local = LocalShellAction(
            command=arguments.get("command", []),
            timeout_ms=arguments.get("timeout_ms"),
            working_directory=arguments.get("working_directory"),
        )
        return StoredLocalShellCall(id=ids("lsh"), call_id=ids("call"), action=local, status=status)
    if call.name == "apply_patch":
        if not call.complete:
            return None
        operation = ApplyPatchOperation.model_validate(arguments)
        if operation.type != "delete_file" and operation.diff is None:
            operation.diff = ""
        return StoredApplyPatchCall(id=ids("apc"), call_id=ids("call"), operation=operation)
    return StoredToolSearchCall(id=ids("tsc"), call_id=ids("call"), arguments=arguments, status=status)


def call_items(
    parsed: list[ParsedCall],
    functions: dict[str, str | None],
    custom_tools: set[str],
    ids: Callable[[str], str],
    tool_types: frozenset[str] | set[str] = frozenset(),
) -> list[ClientCall]:
    """Each parsed call as the item of its tool's kind; `functions` maps each name to its namespace, and
    `tool_types` names the offered client-executed tool types (see app/generation/tool_calls.py)."""
    calls: list[ClientCall] = []
    for call in parsed:
        namespace = functions[call.name]
        if call.name in tool_types:
            typed = tool_type_call(call, ids)
            if typed is not None:
                calls.append(typed)
        elif call.name in custom_tools:
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


def _tool_type_events(call: ToolTypeCall, index: int, number: Number) -> list[ResponseEvent]:
    """A client tool type's call: opened in progress (a shell call with no commands yet), each shell command
    added, in one delta and done, closed."""
    if isinstance(call, StoredShellCall):
        opening: Item = call.model_copy(
            update={"status": "in_progress", "action": call.action.model_copy(update={"commands": []})}
        )
    else:
        opening = call.model_copy(update={"status": "in_progress"})
    events: list[ResponseEvent] = [
        OutputItemEvent(type="response.output_item.added", sequence_number=number(), output_index=index, item=opening)
    ]
    if isinstance(call, StoredShellCall):
        for position, command in enumerate(call.action.commands):
            where = {"output_index": index, "command_index": position}
            events += [
                ShellCallCommandEvent(
                    type="response.shell_call_command.added", sequence_number=number(), command="", **where
                ),
                ShellCallCommandDeltaEvent(sequence_number=number(), delta=command, **where),
                ShellCallCommandEvent(
                    type="response.shell_call_command.done", sequence_number=number(), command=command, **where
                ),
            ]
    events.append(
        OutputItemEvent(type="response.output_item.done", sequence_number=number(), output_index=index, item=call)
    )
    return events


def call_events(call: ClientCall, index: int, number: Number) -> list[ResponseEvent]:
    """One call, whole: opened empty, its arguments (or input) in one delta and done, closed."""
    if not isinstance(call, StoredFunctionCall | StoredCustomToolCall):
        return _tool_type_events(call, index, number)
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
