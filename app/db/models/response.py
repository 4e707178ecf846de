"""The `responses` table: one row a stored response, its request parameters and its output."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now


class ResponseRow(Base):
    __tablename__ = "responses"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(256))
    background: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Where its job waited (interactive, background or batch: a batch line's); None on rows stored before it was.
    job_class: Mapped[str | None] = mapped_column(String(16), default=None)
    #: Created with stream=true: with background, its events are stored for replay.
    stream: Mapped[bool] = mapped_column(Boolean, default=False)
    previous_response_id: Mapped[str | None] = mapped_column(String(64), default=None)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    output: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    incomplete_details: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    #: The generation job (prompt tokens, sampling), kept so that a job lost with Redis can be enqueued again
    #: and a background job whose worker died can be taken over; dropped once the response ends (or, for a
    #: foreground job, which is never taken over, once claimed).
    job: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    #: app/prompt_cache/diagnosis.py: the hashes a later response's prompt_cache_diagnostics compare against
    #: (None on rows stored before them), and this response's own diagnostics (when it named a comparison).
    prompt_cache_fingerprint: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    prompt_cache_diagnostics: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    #: Refreshed by the worker while it generates.
    heartbeat_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    #: The worker that holds the job, and until when: its heartbeat renews the lease; only an expired one is
    #: taken over (or ended) by the reconciler.
    lease_owner: Mapped[str | None] = mapped_column(String(64), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    #: Set by a cancel before anything else: whoever holds or later takes the job honours it.
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    #: Set by a WebSocket `response.steer` before its signal: the job stops at its next safe boundary, `steered`.
    steer_requested_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    #: How many times a worker claimed the job (the first run, then each takeover).
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    #: Of those runs, how many were preempted (handed back for another tenant's job): they ended well, so only
    #: the others count against RESPONSES_MAX_ATTEMPTS.
    preemptions: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now, onupdate=utc_now)
    completed_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)

    __table_args__ = (
        Index("ix_responses_previous_response_id", "previous_response_id"),
        Index("ix_responses_status", "status"),
        Index("ix_responses_status_lease_expires_at", "status", "lease_expires_at"),
        Index("ix_responses_status_created_at", "status", "created_at"),
        #: GET /v1/responses: a tenant's responses newest first.
        Index("ix_responses_tenant_created_at", "tenant", "created_at"),
        #: The cap on a tenant's queued background responses: counted at each background create.
        Index("ix_responses_tenant_status_background", "tenant", "status", "background"),
    )
