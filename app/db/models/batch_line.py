"""The `batch_lines` table: one request of a batch, with the response id fixed when the batch starts (so that it
runs once, whoever submits it and whatever restarts), its state and, once it ended, the line of the output or
error file it becomes. Deleted when the batch's files are written."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime


class BatchLineRow(Base):
    __tablename__ = "batch_lines"

    batch_id: Mapped[str] = mapped_column(String(64), ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True)
    #: The line's number in the input file (1-based, as validation errors name it).
    line: Mapped[int] = mapped_column(Integer, primary_key=True)
    #: The output line's id (batch_req_...).
    id: Mapped[str] = mapped_column(String(64))
    custom_id: Mapped[str] = mapped_column(Text)
    response_id: Mapped[str] = mapped_column(String(64))
    #: The request's body (a /v1/responses create).
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: Whether the line's response stays readable once the batch has its output (the line's `store`).
    keep_response: Mapped[bool] = mapped_column(Boolean, default=True)
    #: pending (not submitted), submitting (claimed by a node at claimed_at), running (its response stored and
    #: enqueued), stopping (running, its cancellation requested), done (its output line written below).
    state: Mapped[str] = mapped_column(String(16), default="pending")
    claimed_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    #: A pending line refused by its project's rate limit waits until then (the limit's retry-after), never failing.
    wait_until: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    #: Once done: the output line's response.status_code (None: no response, see `error`) and body.
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    #: Once done without an HTTP answer (the batch expired or was cancelled first): {code, message}.
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)

    __table_args__ = (Index("ix_batch_lines_state_batch_id", "state", "batch_id"),)
