"""The `batches` table: a tenant's batch of /v1/responses requests, its status and the moments it passed."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now


class BatchRow(Base):
    __tablename__ = "batches"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    #: validating, failed, in_progress, finalizing, completed, expired, cancelling, cancelled.
    status: Mapped[str] = mapped_column(String(16))
    endpoint: Mapped[str] = mapped_column(String(64))
    completion_window: Mapped[str] = mapped_column(String(16))
    input_file_id: Mapped[str] = mapped_column(String(64))
    #: The served model the lines name (the first line's, resolved as its create resolves it), set when the batch
    #: starts; None until then, or when a batch fails validation.
    model: Mapped[str | None] = mapped_column(String(256), default=None)
    output_file_id: Mapped[str | None] = mapped_column(String(64), default=None)
    error_file_id: Mapped[str | None] = mapped_column(String(64), default=None)
    metadata_: Mapped[dict[str, str] | None] = mapped_column("metadata", JSON, default=None)
    #: Validation's errors ({object: "list", data: [...]}), when it failed.
    errors: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    total: Mapped[int] = mapped_column(Integer, default=0)
    completed: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    #: The tokens of the lines collected so far (each added once, in the unit of work that settles its line).
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    reasoning_tokens: Mapped[int] = mapped_column(Integer, default=0)
    #: A node validating or finalizing the batch holds it until then (a conditional UPDATE claims it); an
    #: expired claim (its node died) is taken again.
    claimed_until: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    in_progress_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    finalizing_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    completed_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    failed_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    expired_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    cancelling_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    cancelled_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)

    __table_args__ = (
        #: GET /v1/batches: a tenant's batches newest first.
        Index("ix_batches_tenant_created_at", "tenant", "created_at"),
        #: The periodic advance: the batches that still move.
        Index("ix_batches_status", "status"),
    )
