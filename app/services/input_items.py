"""A request's input -> stored message items (ids, normalised parts), and the paged input_items listing."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import TypeAdapter
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.repositories import responses as repository
from app.errors import InvalidRequest, response_not_found
from app.ids import new_id
from app.schemas.items import (
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputMessage,
    InputText,
    Item,
    MessageItem,
    OutputText,
    ReasoningItem,
    Refusal,
    StoredCustomToolCall,
    StoredCustomToolCallOutput,
    StoredFunctionCall,
    StoredFunctionCallOutput,
    StoredReasoning,
    UnsupportedItem,
    UnsupportedPart,
)
from app.schemas.responses import InputItemList

MAX_PAGE_LIMIT = 100
STORED_ITEM: TypeAdapter[Item] = TypeAdapter(Item)


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


def normalize_input(request_input: str | list[Any]) -> list[dict[str, Any]]:
    """The request's input as stored items, each with an id, in order."""
    if isinstance(request_input, str):
        request_input = [InputMessage(role="user", content=request_input)]
    items: list[dict[str, Any]] = []
    for index, entry in enumerate(request_input):
        param = f"input[{index}]"
        if isinstance(entry, UnsupportedItem):
            raise InvalidRequest(
                f"Input items of type '{entry.type}' are not supported by this server yet.",
                param=f"{param}.type",
                code="unsupported_item_type",
            )
        item: Item
        if isinstance(entry, CustomToolCallItem):
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
                content=_message_parts(entry, param),
                status=entry.status or "completed",
            )
        items.append(
            item.model_dump(mode="json", exclude_none=isinstance(item, StoredFunctionCall | StoredCustomToolCall))
        )
    return items


async def list_input_items(
    session: AsyncSession,
    response_id: str,
    tenant: str,
    *,
    limit: int,
    order: Literal["asc", "desc"],
    after: str | None,
) -> InputItemList:
    if not 1 <= limit <= MAX_PAGE_LIMIT:
        raise InvalidRequest(
            f"Invalid 'limit': {limit}. It must be between 1 and {MAX_PAGE_LIMIT}.",
            param="limit",
            code="invalid_value",
        )
    if await repository.get_response(session, response_id, tenant) is None:
        raise response_not_found(response_id)
    after_position = None
    if after is not None:
        after_position = await repository.find_item_position(session, response_id, after)
        if after_position is None:
            raise InvalidRequest(
                f"Invalid 'after': no input item '{after}' in response '{response_id}'.",
                param="after",
                code="invalid_value",
            )
    rows, has_more = await repository.page_input_items(
        session, response_id, limit=limit, order=order, after_position=after_position
    )
    data = [STORED_ITEM.validate_python(row) for row in rows]
    return InputItemList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=has_more,
    )
