"""The `api_keys` table: a project's keys, each with a role; the key itself is never stored, only its SHA-256
hash (looked up by it) and a short hint to tell keys apart."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now


class ApiKeyRow(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64), ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    #: admin, member or read (app/tenants/identity.py: Role).
    role: Mapped[str] = mapped_column(String(16))
    #: SHA-256 of the key, hex.
    key_hash: Mapped[str] = mapped_column(String(64))
    #: The key's first and last few characters ("sk-lr-AbCd...wXyZ"), to recognise it in a list.
    redacted_value: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    #: Updated at most once a minute per key (app/keys/cache.py), not on every request.
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)

    __table_args__ = (UniqueConstraint("key_hash"), Index("ix_api_keys_project_id", "project_id"))
