"""The `webhook_deliveries` table, the outbox: one event to one endpoint, written in the transaction that ended
its object, then claimed and sent (retried under the same webhook-id) by whichever process is alive."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now


class WebhookDeliveryRow(Base):
    __tablename__ = "webhook_deliveries"

    #: The `webhook-id` header: the same on every attempt, for receivers to deduplicate by.
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    endpoint_id: Mapped[str] = mapped_column(String(64))
    tenant: Mapped[str] = mapped_column(String(64))
    #: The event (`evt_...`, the body's id; one event goes to each endpoint subscribed to its type).
    event_id: Mapped[str] = mapped_column(String(64))
    event_type: Mapped[str] = mapped_column(String(64))
    #: The object the event is about (a response's or a batch's id).
    object_id: Mapped[str] = mapped_column(String(64))
    #: The exact body sent (and signed) on every attempt.
    body: Mapped[str] = mapped_column(Text)
    #: `pending` (due at next_attempt_at, or claimed until then), `delivered`, or `failed` (given up).
    status: Mapped[str] = mapped_column(String(16), default="pending")
    next_attempt_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    #: Who claimed the current attempt (a fencing token: a late writer of an older claim changes nothing).
    claim_token: Mapped[str | None] = mapped_column(String(64), default=None)
    last_status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    #: Why the last attempt failed, in our words: the receiver's status, never what it said.
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    last_attempt_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    delivered_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)

    __table_args__ = (
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_endpoint_created_at", "endpoint_id", "created_at"),
    )
