"""The `conversations` table: a tenant's durable, ordered list of items, and who is adding to it now."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now


class ConversationRow(Base):
    __tablename__ = "conversations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    metadata_: Mapped[dict[str, str]] = mapped_column("metadata", JSON, default=dict)
    #: The position the next appended item takes (positions only grow, so deletions leave gaps).
    next_position: Mapped[int] = mapped_column(Integer, default=0)
    #: Bumped by every change to the items: a response claims the conversation only if it is unchanged
    #: since the response read it as its context.
    revision: Mapped[int] = mapped_column(Integer, default=0)
    #: The response running on this conversation now (see app/conversations/repository.py: claim).
    active_response_id: Mapped[str | None] = mapped_column(String(64), default=None)
    locked_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now, onupdate=utc_now)

    __table_args__ = (Index("ix_conversations_tenant", "tenant"),)
