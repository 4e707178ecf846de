"""The `generation_progress` table: what a background generation produced so far, appended a few pieces at a
time (never rewritten), for a takeover to continue from and a reconciler to keep as the output so far."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base


class GenerationProgressRow(Base):
    __tablename__ = "generation_progress"

    response_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True
    )
    #: 0, 1, 2...: the order the rows were written in, across runs (a takeover goes on from the last one).
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    #: The text pieces the model produced since the previous row, as the assembler was given them, and (JSON
    #: objects between them) the steps of a tool loop: a round that called tools, a call that ended.
    pieces: Mapped[list[str | dict[str, Any]]] = mapped_column(JSON)
    #: The item and call ids the assembler gave out since the previous row.
    ids: Mapped[list[str]] = mapped_column(JSON)
