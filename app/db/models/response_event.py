"""The `response_events` table: every event of a background stream, so that any node can replay it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base


class ResponseEventRow(Base):
    __tablename__ = "response_events"

    response_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True
    )
    sequence_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    event: Mapped[dict[str, Any]] = mapped_column(JSON)
