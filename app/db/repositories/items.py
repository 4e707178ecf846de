"""Queries that find stored items by id, wherever they are kept: a response's input, a finished response's
output (through the output_items index), a conversation; always within one tenant."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

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
