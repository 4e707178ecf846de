"""The Conversations API: create, retrieve, update, delete a conversation; add, list, retrieve, delete items."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import utc_now
from app.db.models import ConversationRow
from app.db.repositories import conversations as repository
from app.errors import InvalidRequest, NotFound
from app.ids import new_id
from app.runtime import Runtime
from app.schemas.conversations import (
    ConversationItemList,
    ConversationObject,
    DeletedConversation,
)
from app.schemas.items import InputItem, Item
from app.schemas.paging import PageRequest
from app.services.compaction_items import check_compactions
from app.services.context import conversation_not_found
from app.services.includes import with_includes
from app.services.input_items import STORED_ITEM, item_page
from app.services.input_normalization import normalize_input
from app.services.item_references import resolve_references


def _conversation(row: ConversationRow) -> ConversationObject:
    return ConversationObject(id=row.id, created_at=int(row.created_at.timestamp()), metadata=row.metadata_ or {})


def item_not_found(item_id: str) -> NotFound:
    return NotFound(f"Item with id '{item_id}' not found.", param="item_id")


async def _stored_items(runtime: Runtime, entries: list[InputItem], tenant: str) -> list[dict[str, Any]]:
    """Input items as a conversation keeps them: normalised, references resolved, compactions verified."""
    items = normalize_input(entries)
    await resolve_references(runtime, items, tenant, param="items")
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
    async with runtime.sessionmaker() as session, session.begin():
        await repository.insert_conversation(session, row, stored)
    return _conversation(row)


async def get_conversation(session: AsyncSession, conversation_id: str, tenant: str) -> ConversationObject:
    return _conversation(await _owned(session, conversation_id, tenant))


async def update_conversation(
    session: AsyncSession, conversation_id: str, tenant: str, metadata: dict[str, str] | None
) -> ConversationObject:
    if not await repository.set_metadata(session, conversation_id, tenant, metadata or {}):
        raise conversation_not_found(conversation_id)
    return await get_conversation(session, conversation_id, tenant)


async def delete_conversation(session: AsyncSession, conversation_id: str, tenant: str) -> DeletedConversation:
    """The conversation and its items; the responses that ran on it stay."""
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
    async with runtime.sessionmaker() as session:
        await _owned(session, conversation_id, tenant)
    stored = await _stored_items(runtime, entries, tenant)
    async with runtime.sessionmaker() as session, session.begin():
        if not await repository.append_items(session, conversation_id, stored):
            raise conversation_not_found(conversation_id)
    data = with_includes([STORED_ITEM.validate_python(item) for item in stored], includes)
    return ConversationItemList(data=data, first_id=data[0].id, last_id=data[-1].id, has_more=False)


async def list_items(
    session: AsyncSession,
    conversation_id: str,
    tenant: str,
    page: PageRequest,
    *,
    includes: frozenset[str] = frozenset(),
) -> ConversationItemList:
    await _owned(session, conversation_id, tenant)
    after_position = None
    if page.after is not None:
        after_position = await repository.find_item_position(session, conversation_id, page.after)
        if after_position is None:
            raise InvalidRequest(
                f"Invalid 'after': no item '{page.after}' in conversation '{conversation_id}'.",
                param="after",
                code="invalid_value",
            )
    rows, has_more = await repository.page_items(
        session, conversation_id, limit=page.limit, order=page.order, after_position=after_position
    )
    return item_page(ConversationItemList, rows, has_more, includes)


async def get_item(
    session: AsyncSession,
    conversation_id: str,
    item_id: str,
    tenant: str,
    *,
    includes: frozenset[str] = frozenset(),
) -> Item:
    await _owned(session, conversation_id, tenant)
    item = await repository.get_item(session, conversation_id, item_id)
    if item is None:
        raise item_not_found(item_id)
    return with_includes([STORED_ITEM.validate_python(item)], includes)[0]


async def delete_item(session: AsyncSession, conversation_id: str, item_id: str, tenant: str) -> ConversationObject:
    """Remove the item from the conversation (every copy of that id in it); returns the conversation."""
    row = await _owned(session, conversation_id, tenant)
    if not await repository.delete_item(session, conversation_id, item_id):
        raise item_not_found(item_id)
    return _conversation(row)
