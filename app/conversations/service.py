"""The Conversations API: create, retrieve, update, delete a conversation; add, list, retrieve, delete items."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.conversations import repository
from app.conversations.schemas import ConversationItemList, ConversationObject, DeletedConversation
from app.conversations.turns import conversation_not_found
from app.db.base import utc_now
from app.db.models import ConversationRow
from app.db.session import Database
from app.errors import NotFound
from app.generation.prompt import Turn
from app.ids import new_id
from app.items import repository as items
from app.items.compaction import check_compactions
from app.items.includes import with_includes
from app.items.normalization import check_call_outputs, normalize_input
from app.items.paging import stored_item_page
from app.items.references import resolve_references
from app.items.repository import CONVERSATION_ITEMS
from app.mcp.approvals import approved_calls
from app.quotas.stored_bytes import charge_stored_bytes, json_size
from app.runtime import Runtime
from app.schemas.items import CALL_OUTPUT_TYPES, STORED_ITEM, InputItem, Item
from app.schemas.paging import PageRequest, cursor_page


def _conversation(row: ConversationRow) -> ConversationObject:
    return ConversationObject(id=row.id, created_at=int(row.created_at.timestamp()), metadata=row.metadata_ or {})


def item_not_found(item_id: str) -> NotFound:
    return NotFound(f"Item with id '{item_id}' not found.", param="item_id")


async def _stored_items(
    runtime: Runtime, entries: list[InputItem], tenant: str, history: Sequence[Turn] = ()
) -> list[dict[str, Any]]:
    """Input items as a conversation keeps them, checked as a create's input is (errors name `items[i]`):
    normalised, references resolved, each tool call output answering a call (in `history`, the conversation's
    items, or among them), each mcp_approval_response answering an mcp_approval_request no other answered (the
    next response on the conversation makes an approved call), compactions verified."""
    items = normalize_input(entries, param="items")
    await resolve_references(runtime.database, items, tenant, param="items")
    check_call_outputs(history, items, param="items")
    approved_calls([item for turn in history for item in (*turn.input_items, *turn.output_items)], items, "items")
    check_compactions(runtime.sealer, tenant, items, "items")
    return items


async def _owned(session: AsyncSession, conversation_id: str, tenant: str) -> ConversationRow:
    row = await repository.get_conversation(session, conversation_id, tenant)
    if row is None:
        raise conversation_not_found(conversation_id)
    return row


async def create_conversation(
    runtime: Runtime, tenant: str, *, items: list[InputItem] | None, metadata: dict[str, str] | None
) -> ConversationObject:
    stored = await _stored_items(runtime, items or [], tenant)
    row = ConversationRow(id=new_id("conv"), tenant=tenant, metadata_=metadata or {}, created_at=utc_now())
    async with runtime.database.transaction() as session:
        await repository.insert_conversation(session, row, stored)
        await charge_stored_bytes(session, runtime, tenant, lambda: json_size(row.metadata_, stored))
    return _conversation(row)


async def get_conversation(database: Database, conversation_id: str, tenant: str) -> ConversationObject:
    async with database.read() as session:
        return _conversation(await _owned(session, conversation_id, tenant))


async def update_conversation(
    database: Database, conversation_id: str, tenant: str, metadata: dict[str, str] | None
) -> ConversationObject:
    async with database.transaction() as session:
        if not await repository.set_metadata(session, conversation_id, tenant, metadata or {}):
            raise conversation_not_found(conversation_id)
        return _conversation(await _owned(session, conversation_id, tenant))


async def delete_conversation(database: Database, conversation_id: str, tenant: str) -> DeletedConversation:
    """The conversation and its items; the responses that ran on it stay."""
    async with database.transaction() as session:
        if not await repository.delete_conversation(session, conversation_id, tenant):
            raise conversation_not_found(conversation_id)
    return DeletedConversation(id=conversation_id)


async def add_items(
    runtime: Runtime,
    conversation_id: str,
    tenant: str,
    entries: list[InputItem],
    *,
    includes: frozenset[str] = frozenset(),
) -> ConversationItemList:
    """Append items by hand; they are in the context of the next response on the conversation."""
    # A reference may name an output (or an approval) too.
    answers = CALL_OUTPUT_TYPES | {"item_reference", "mcp_approval_response"}
    answers_calls = any(entry.type in answers for entry in entries)
    async with runtime.database.read() as session:
        await _owned(session, conversation_id, tenant)
        # The calls (and approval requests) that outputs (and approvals) may answer are the conversation's: read
        # only when an item needs them.
        history = [Turn(await repository.all_items(session, conversation_id), [])] if answers_calls else []
    stored = await _stored_items(runtime, entries, tenant, history)
    async with runtime.database.transaction() as session:
        if not await repository.append_items(session, conversation_id, stored):
            raise conversation_not_found(conversation_id)
        await charge_stored_bytes(session, runtime, tenant, lambda: json_size(stored))
    data = with_includes([STORED_ITEM.validate_python(item) for item in stored], includes)
    return cursor_page(ConversationItemList, data, has_more=False)


async def list_items(
    database: Database,
    conversation_id: str,
    tenant: str,
    page: PageRequest,
    *,
    includes: frozenset[str] = frozenset(),
) -> ConversationItemList:
    async with database.read() as session:
        await _owned(session, conversation_id, tenant)
        return await stored_item_page(
            session,
            CONVERSATION_ITEMS,
            conversation_id,
            page,
            ConversationItemList,
            includes=includes,
            unknown_after=lambda after: f"Invalid 'after': no item '{after}' in conversation '{conversation_id}'.",
        )


async def get_item(
    database: Database,
    conversation_id: str,
    item_id: str,
    tenant: str,
    *,
    includes: frozenset[str] = frozenset(),
) -> Item:
    async with database.read() as session:
        await _owned(session, conversation_id, tenant)
        item = await items.stored_item(session, CONVERSATION_ITEMS, conversation_id, item_id)
    if item is None:
        raise item_not_found(item_id)
    return with_includes([STORED_ITEM.validate_python(item)], includes)[0]


async def delete_item(database: Database, conversation_id: str, item_id: str, tenant: str) -> ConversationObject:
    """Remove the item from the conversation (every copy of that id in it); returns the conversation."""
    async with database.transaction() as session:
        row = await _owned(session, conversation_id, tenant)
        if not await repository.delete_item(session, conversation_id, item_id):
            raise item_not_found(item_id)
        return _conversation(row)
