"""The `conversation_items` table: a conversation's items in order, as stored items (schemas.items.Item)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now


class ConversationItemRow(Base):
    __tablename__ = "conversation_items"

    conversation_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    # NOTE: not unique: a client may send an item (with its id) that the conversation already holds.
    item_id: Mapped[str] = mapped_column(String(64))
    item: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)

    __table_args__ = (Index("ix_conversation_items_item_id", "item_id"),)
