"""Queries on stored items: finding them by id wherever they are kept (a response's input, a finished response's
output through the output_items index, a conversation; always within one tenant), and the lists of items kept in
order under an owner (a response's input items, a conversation's items), a page at a time by position."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from app.db.models import ConversationItemRow, ConversationRow, InputItemRow, OutputItemRow, ResponseRow


async def index_output_items(session: AsyncSession, response_id: str, output: Sequence[dict[str, Any]]) -> None:
    session.add_all(
        OutputItemRow(response_id=response_id, position=position, item_id=item["id"])
        for position, item in enumerate(output)
        if item.get("id")
    )
    await session.flush()


async def find_items(session: AsyncSession, item_ids: Collection[str], tenant: str) -> dict[str, dict[str, Any]]:
    """The stored item of each id that the tenant holds anywhere (ids not found are left out)."""
    wanted = set(item_ids)
    found: dict[str, dict[str, Any]] = {}
    if not wanted:
        return found
    inputs = (
        select(InputItemRow.item_id, InputItemRow.item)
        .join(ResponseRow, ResponseRow.id == InputItemRow.response_id)
        .where(InputItemRow.item_id.in_(wanted), ResponseRow.tenant == tenant)
    )
    for item_id, item in await session.execute(inputs):
        found.setdefault(item_id, item)
    if missing := wanted - found.keys():
        outputs = (
            select(OutputItemRow.item_id, OutputItemRow.position, ResponseRow.output)
            .join(ResponseRow, ResponseRow.id == OutputItemRow.response_id)
            .where(OutputItemRow.item_id.in_(missing), ResponseRow.tenant == tenant)
        )
        for item_id, position, output in await session.execute(outputs):
            found.setdefault(item_id, output[position])
    if missing := wanted - found.keys():
        conversation_items = (
            select(ConversationItemRow.item_id, ConversationItemRow.item)
            .join(ConversationRow, ConversationRow.id == ConversationItemRow.conversation_id)
            .where(ConversationItemRow.item_id.in_(missing), ConversationRow.tenant == tenant)
        )
        for item_id, item in await session.execute(conversation_items):
            found.setdefault(item_id, item)
    return found


@dataclass(frozen=True, slots=True)
class ItemTable:
    """A table of items kept in order under an owner (its columns)."""

    owner: InstrumentedAttribute[str]
    position: InstrumentedAttribute[int]
    item_id: InstrumentedAttribute[str]
    item: InstrumentedAttribute[dict[str, Any]]


INPUT_ITEMS = ItemTable(InputItemRow.response_id, InputItemRow.position, InputItemRow.item_id, InputItemRow.item)
CONVERSATION_ITEMS = ItemTable(
    ConversationItemRow.conversation_id,
    ConversationItemRow.position,
    ConversationItemRow.item_id,
    ConversationItemRow.item,
)


async def item_position(session: AsyncSession, table: ItemTable, owner_id: str, item_id: str) -> int | None:
    """Where the item of that id first stands in the owner's list."""
    position: int | None = (await session.execute(_first_with_id(table.position, table, owner_id, item_id))).scalar()
    return position


async def stored_item(session: AsyncSession, table: ItemTable, owner_id: str, item_id: str) -> dict[str, Any] | None:
    """The owner's item of that id (its first copy)."""
    item: dict[str, Any] | None = (await session.execute(_first_with_id(table.item, table, owner_id, item_id))).scalar()
    return item


def _first_with_id(column: InstrumentedAttribute[Any], table: ItemTable, owner_id: str, item_id: str) -> Select[Any]:
    """The query of `column` of the first item of that id in the owner's list."""
    return select(column).where(table.owner == owner_id, table.item_id == item_id).order_by(table.position).limit(1)


async def item_page(
    session: AsyncSession,
    table: ItemTable,
    owner_id: str,
    *,
    limit: int,
    order: Literal["asc", "desc"],
    after_position: int | None,
) -> tuple[list[dict[str, Any]], bool]:
    """One page of the owner's items in `order` of position, after `after_position`, and whether more follow."""
    query = select(table.item).where(table.owner == owner_id)
    if order == "asc":
        if after_position is not None:
            query = query.where(table.position > after_position)
        query = query.order_by(table.position.asc())
    else:
        if after_position is not None:
            query = query.where(table.position < after_position)
        query = query.order_by(table.position.desc())
    rows = list((await session.execute(query.limit(limit + 1))).scalars())
    return rows[:limit], len(rows) > limit
