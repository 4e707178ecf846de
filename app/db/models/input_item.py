"""The `input_items` table: the items one request gave, in order (never the chain's)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base


class InputItemRow(Base):
    __tablename__ = "input_items"

    response_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    # NOTE: not unique on its own: a stateless client may send the same item (with its id) in many requests.
    item_id: Mapped[str] = mapped_column(String(64))
    item: Mapped[dict[str, Any]] = mapped_column(JSON)

    #: item_reference finds input items by id.
    __table_args__ = (Index("ix_input_items_item_id", "item_id"),)
