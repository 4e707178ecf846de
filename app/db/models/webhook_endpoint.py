"""The `webhook_endpoints` table: where a tenant's events go, the signing secret (sealed), and whether the endpoint
is still delivered to."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now


class WebhookEndpointRow(Base):
    __tablename__ = "webhook_endpoints"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(256))
    url: Mapped[str] = mapped_column(Text)
    event_types: Mapped[list[str]] = mapped_column(JSON, default=list)
    #: `enabled`, or `disabled` once its deliveries have failed for the whole retry window.
    status: Mapped[str] = mapped_column(String(16), default="enabled")
    #: The signing secret, sealed for this tenant (app/secrets); never stored in the clear.
    sealed_secret: Mapped[str] = mapped_column(Text)
    signing_secret_hint: Mapped[str] = mapped_column(String(32))
    #: The secret before the last rotation, still signing beside the new one until `previous_secret_until`.
    previous_sealed_secret: Mapped[str | None] = mapped_column(Text, default=None)
    previous_secret_until: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    #: The first failed attempt since the last success (None while it succeeds): its age decides disabling.
    failing_since: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)

    __table_args__ = (Index("ix_webhook_endpoints_tenant_created_at", "tenant", "created_at"),)
