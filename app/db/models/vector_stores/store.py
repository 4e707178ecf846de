"""The `vector_stores` table: a tenant's collection of searchable files (their chunks in `vector_store_chunks`)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now


class VectorStoreRow(Base):
    __tablename__ = "vector_stores"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(256), default="")
    description: Mapped[str | None] = mapped_column(Text, default=None)
    metadata_: Mapped[dict[str, str] | None] = mapped_column("metadata", JSON, default=None)
    #: The embedding model its chunks are embedded with, fixed at creation; None: searched lexically only.
    embedding_model: Mapped[str | None] = mapped_column(String(256), default=None)
    #: expires_after.days (its anchor is always last_active_at); None: kept until deleted.
    expires_after_days: Mapped[int | None] = mapped_column(Integer, default=None)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    #: Its last search or change: what expires_after counts from.
    last_active_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    #: When it expires (last_active_at + expires_after), kept beside them so that retention finds expired stores
    #: with one indexed comparison.
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)

    __table_args__ = (
        #: GET /v1/vector_stores: a tenant's stores in order of creation.
        Index("ix_vector_stores_tenant_created_at", "tenant", "created_at"),
        #: Retention: the stores past their expiry.
        Index("ix_vector_stores_expires_at", "expires_at"),
    )
