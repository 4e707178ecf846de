"""Queries on conversations and their items: create, read, add, delete, and the claim a response holds
on a conversation while it runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, delete, exists, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import utc_now
from app.db.clock import database_in, database_now
from app.db.models import ConversationItemRow, ConversationRow, ResponseRow
from app.events.terminal import TERMINAL_STATUSES


async def insert_conversation(session: AsyncSession, row: ConversationRow, items: Sequence[dict[str, Any]]) -> None:
    row.next_position = len(items)
    session.add(row)
    await session.flush()
    session.add_all(
        ConversationItemRow(conversation_id=row.id, position=position, item_id=item["id"], item=item)
        for position, item in enumerate(items)
    )
    await session.flush()


async def get_conversation(session: AsyncSession, conversation_id: str, tenant: str) -> ConversationRow | None:
    query = select(ConversationRow).where(ConversationRow.id == conversation_id, ConversationRow.tenant == tenant)
    return (await session.execute(query)).scalar_one_or_none()


async def set_metadata(session: AsyncSession, conversation_id: str, tenant: str, metadata: dict[str, str]) -> bool:
    query = (
        update(ConversationRow)
        .where(ConversationRow.id == conversation_id, ConversationRow.tenant == tenant)
        .values(metadata_=metadata, updated_at=utc_now())
        .execution_options(synchronize_session=False)
    )
    return int(getattr(await session.execute(query), "rowcount", 0)) == 1


async def delete_conversation(session: AsyncSession, conversation_id: str, tenant: str) -> bool:
    if await get_conversation(session, conversation_id, tenant) is None:
        return False
    await session.execute(delete(ConversationItemRow).where(ConversationItemRow.conversation_id == conversation_id))
    await session.execute(delete(ConversationRow).where(ConversationRow.id == conversation_id))
    return True


async def all_items(session: AsyncSession, conversation_id: str) -> list[dict[str, Any]]:
    query = (
        select(ConversationItemRow.item)
        .where(ConversationItemRow.conversation_id == conversation_id)
        .order_by(ConversationItemRow.position)
    )
    return list((await session.execute(query)).scalars())


async def append_items(session: AsyncSession, conversation_id: str, items: Sequence[dict[str, Any]]) -> bool:
    """Add items at the end, in order; False when the conversation is gone.

    The counter update comes first: it locks the conversation's row (Postgres), so concurrent appends take
    their positions one after the other and each one's items stay together.
    """
    bumped = await session.execute(
        update(ConversationRow)
        .where(ConversationRow.id == conversation_id)
        .values(
            next_position=ConversationRow.next_position + len(items),
            revision=ConversationRow.revision + 1,
            updated_at=utc_now(),
        )
        .execution_options(synchronize_session=False)
    )
    if int(getattr(bumped, "rowcount", 0)) != 1:
        return False
    end = (
        await session.execute(select(ConversationRow.next_position).where(ConversationRow.id == conversation_id))
    ).scalar_one()
    start = end - len(items)
    session.add_all(
        ConversationItemRow(conversation_id=conversation_id, position=start + offset, item_id=item["id"], item=item)
        for offset, item in enumerate(items)
    )
    await session.flush()
    return True


async def delete_item(session: AsyncSession, conversation_id: str, item_id: str) -> bool:
    result = await session.execute(
        delete(ConversationItemRow).where(
            ConversationItemRow.conversation_id == conversation_id, ConversationItemRow.item_id == item_id
        )
    )
    if not int(getattr(result, "rowcount", 0)):
        return False
    await session.execute(
        update(ConversationRow)
        .where(ConversationRow.id == conversation_id)
        .values(revision=ConversationRow.revision + 1, updated_at=utc_now())
        .execution_options(synchronize_session=False)
    )
    return True


async def claim(
    session: AsyncSession,
    conversation_id: str,
    tenant: str,
    *,
    response_id: str,
    seen_revision: int,
    unstored_lease_s: float,
) -> bool:
    """Mark `response_id` as the one response running on the conversation, if the conversation is unchanged
    since the response read it and no other response holds it.

    A claim ends when its response releases it, when that response reaches a terminal status (cancelled,
    failed by recovery: whoever ended it), or, for a response that has no row (store: false), after its lease of
    `unstored_lease_s`, written and judged by the database's clock (app/db/clock.py), not the API nodes'.
    """
    holder = ConversationRow.active_response_id
    holder_row = select(ResponseRow.id).where(ResponseRow.id == holder)
    free = or_(
        holder.is_(None),
        exists(holder_row.where(ResponseRow.status.in_(TERMINAL_STATUSES))),
        and_(ConversationRow.locked_at < database_in(session, -unstored_lease_s), ~exists(holder_row)),
    )
    query = (
        update(ConversationRow)
        .where(
            ConversationRow.id == conversation_id,
            ConversationRow.tenant == tenant,
            ConversationRow.revision == seen_revision,
            free,
        )
        .values(active_response_id=response_id, locked_at=database_now(session))
        .execution_options(synchronize_session=False)
    )
    return int(getattr(await session.execute(query), "rowcount", 0)) == 1


async def release_unstored_claims(session: AsyncSession) -> int:
    """End every claim held by a response that has no row (store: false), whatever its age; how many. Only for
    an embedded start-up: no response of the previous process is running any more. (Claims of stored responses
    end with their response, which reconciliation ends.)"""
    holder_row = select(ResponseRow.id).where(ResponseRow.id == ConversationRow.active_response_id)
    query = (
        update(ConversationRow)
        .where(ConversationRow.active_response_id.is_not(None), ~exists(holder_row))
        .values(active_response_id=None, locked_at=None)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(await session.execute(query), "rowcount", 0))


async def release_claim_of(session: AsyncSession, response_id: str) -> None:
    """End the claim `response_id` holds, on whichever conversation (a response whose end does not know its
    conversation: a foreground one a reconciler ended, its job dropped by its claim)."""
    await session.execute(
        update(ConversationRow)
        .where(ConversationRow.active_response_id == response_id)
        .values(active_response_id=None, locked_at=None)
        .execution_options(synchronize_session=False)
    )


async def release(session: AsyncSession, conversation_id: str, response_id: str) -> None:
    await session.execute(
        update(ConversationRow)
        .where(ConversationRow.id == conversation_id, ConversationRow.active_response_id == response_id)
        .values(active_response_id=None, locked_at=None)
        .execution_options(synchronize_session=False)
    )
