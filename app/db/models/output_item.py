"""The `output_items` table: where each output item of a finished response sits in `responses.output`, by id,
so that an item_reference finds it with an index rather than by reading every response's output."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base


class OutputItemRow(Base):
    __tablename__ = "output_items"

    response_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    item_id: Mapped[str] = mapped_column(String(64))

    __table_args__ = (Index("ix_output_items_item_id", "item_id"),)
