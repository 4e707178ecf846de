"""The `vector_store_file_batches` table: files attached to a store in one request (their status is its files')."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now


class VectorStoreFileBatchRow(Base):
    __tablename__ = "vector_store_file_batches"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    vector_store_id: Mapped[str] = mapped_column(String(64), ForeignKey("vector_stores.id", ondelete="CASCADE"))
    tenant: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    #: Set when it was cancelled (its files still in progress were cancelled with it).
    cancelled_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)

    __table_args__ = (Index("ix_vector_store_file_batches_store", "vector_store_id"),)
