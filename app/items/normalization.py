"""A request's input (a create's `input`, a conversation's `items`) -> the items we store: each with an id, content
parts normalised, unsupported ones refused, and every tool call output answering a call in its context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.errors import InvalidRequest
from app.generation.prompt import Turn, call_ids
from app.ids import new_id
from app.schemas.client_tool_items import CLIENT_TOOL_ID_PREFIXES
from app.schemas.hosted_items import StoredFileSearchCall, StoredWebSearchCall
from app.schemas.items import (
    CALL_OUTPUT_TYPES,
    STORED_ITEM,
    CompactionItem,
    CompactionTriggerItem,
    ConfigurationUpdateItem,
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputMessage,
    InputText,
    Item,
    ItemReference,
    McpApprovalResponseItem,
    MessageItem,
    OutputText,
    ReasoningItem,
    Refusal,
    StoredCompaction,
    StoredConfigurationUpdate,
    StoredCustomToolCall,
    StoredCustomToolCallOutput,
    StoredFunctionCall,
    StoredFunctionCallOutput,
    StoredMcpApprovalRequest,
    StoredMcpApprovalResponse,
    StoredMcpCall,
    StoredMcpListTools,
    StoredReasoning,
    UnsupportedItem,
    UnsupportedPart,
)


def _message_parts(message: InputMessage, param: str) -> list[InputText | OutputText | Refusal]:
    assistant = message.role == "assistant"
    if isinstance(message.content, str):
        text = message.content
        return [OutputText(type="output_text", text=text) if assistant else InputText(type="input_text", text=text)]
    parts: list[InputText | OutputText | Refusal] = []
    for index, part in enumerate(message.content):
        where = f"{param}.content[{index}]"
        if isinstance(part, UnsupportedPart):
            raise InvalidRequest(
                f"Content of type '{part.type}' is not supported: this server's model reads text only.",
                param=f"{where}.type",
                code="unsupported_content_type",
            )
        if assistant and isinstance(part, InputText):
            parts.append(OutputText(type="output_text", text=part.text))
        elif not assistant and not isinstance(part, InputText):
            raise InvalidRequest(
                f"Content of type '{part.type}' is only allowed in assistant messages; "
                f"{message.role} messages take 'input_text'.",
                param=f"{where}.type",
                code="invalid_value",
            )
        else:
            parts.append(part)
    return parts


def _check_trigger(where: str, *, last: bool, allowed: bool) -> None:
    if not allowed:
        raise InvalidRequest(
            "A compaction_trigger item is only taken as the last input item of a create.",
            param=f"{where}.type",
            code="unsupported_item_type",
        )
    if not last:
        raise InvalidRequest(
            "A compaction_trigger item must be the final input item.", param=where, code="invalid_value"
        )


def normalize_input(
    request_input: str | list[Any], param: str = "input", *, trigger: bool = False
) -> list[dict[str, Any]]:
    """The request's input as stored items, each with an id, in order; errors name `param[i]`, the field it came
    in (`input` of a create, `items` of a conversation).

    An item_reference stays `{type: "item_reference", id}` here; references.py resolves it. A compaction_trigger
    (taken only with `trigger`, and only last) stays `{type: "compaction_trigger"}`: the create takes it off.
    """
    if isinstance(request_input, str):
        request_input = [InputMessage(role="user", content=request_input)]
    items: list[dict[str, Any]] = []
    for index, entry in enumerate(request_input):
        where = f"{param}[{index}]"
        if isinstance(entry, UnsupportedItem):
            raise InvalidRequest(
                f"Input items of type '{entry.type}' are not supported by this server yet.",
                param=f"{where}.type",
                code="unsupported_item_type",
            )
        if isinstance(entry, ItemReference):
            items.append({"type": "item_reference", "id": entry.id})
            continue
        if isinstance(entry, CompactionTriggerItem):
            _check_trigger(where, last=index == len(request_input) - 1, allowed=trigger)
            items.append({"type": "compaction_trigger"})
            continue
        item: Item
        prefix = CLIENT_TOOL_ID_PREFIXES.get(type(entry))
        if prefix is not None:
            item = STORED_ITEM.validate_python({**entry.model_dump(), "id": entry.id or new_id(prefix)})
        elif isinstance(
            entry,
            StoredMcpListTools | StoredMcpCall | StoredMcpApprovalRequest | StoredFileSearchCall | StoredWebSearchCall,
        ):
            item = entry  # resent as they were returned, ids included
        elif isinstance(entry, McpApprovalResponseItem):
            item = StoredMcpApprovalResponse(**{**entry.model_dump(), "id": entry.id or new_id("mcpa")})
        elif isinstance(entry, ConfigurationUpdateItem):
            item = StoredConfigurationUpdate(**{**entry.model_dump(), "id": entry.id or new_id("cfg")})
        elif isinstance(entry, CompactionItem):
            item = StoredCompaction(**{**entry.model_dump(exclude_none=True), "id": entry.id or new_id("cmp")})
        elif isinstance(entry, CustomToolCallItem):
            item = StoredCustomToolCall(**{**entry.model_dump(), "id": entry.id or new_id("ctc")})
        elif isinstance(entry, CustomToolCallOutputItem):
            item = StoredCustomToolCallOutput(**{**entry.model_dump(), "id": entry.id or new_id("ctco")})
        elif isinstance(entry, ReasoningItem):
            item = StoredReasoning(**{**entry.model_dump(), "id": entry.id or new_id("rs")})
        elif isinstance(entry, FunctionCallItem):
            item = StoredFunctionCall(**{**entry.model_dump(), "id": entry.id or new_id("fc"), "status": "completed"})
        elif isinstance(entry, FunctionCallOutputItem):
            item = StoredFunctionCallOutput(
                **{**entry.model_dump(), "id": entry.id or new_id("fco"), "status": "completed"}
            )
        else:
            item = MessageItem(
                id=entry.id or new_id("msg"),
                role=entry.role,
                content=_message_parts(entry, where),
                status=entry.status or "completed",
            )
        exclude_none = isinstance(item, StoredFunctionCall | StoredCustomToolCall | StoredCompaction) or (
            prefix is not None
        )
        items.append(item.model_dump(mode="json", exclude_none=exclude_none))
    return items


def check_call_outputs(history: Sequence[Turn], items: Sequence[dict[str, Any]], param: str = "input") -> None:
    """Every function_call_output (or custom one) among `items` (a request's own, at `param[i]`) must answer a
    call in its context: `history` (a chain's turns, a conversation's items) or `items` themselves."""
    known = call_ids(history, items)
    for index, item in enumerate(items):
        if item["type"] in CALL_OUTPUT_TYPES and item["call_id"] not in known:
            raise InvalidRequest(
                f"No tool call found for {item['type']} with call_id {item['call_id']}.",
                param=f"{param}[{index}].call_id",
                code="invalid_value",
            )
