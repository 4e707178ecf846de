"""The `projects` table: a project is a tenant that several API keys share (its responses, conversations), with
its own limits where the operator set them (NULL: the server's setting; 0: off)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now


class ProjectRow(Base):
    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: What operators call it (`keys create --project NAME`); unique.
    name: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    #: RESPONSES_RATE_LIMIT_REQUESTS_PER_MIN for this project.
    requests_per_min: Mapped[int | None] = mapped_column(Integer, default=None)
    #: RESPONSES_RATE_LIMIT_TOKENS_PER_MIN for this project.
    tokens_per_min: Mapped[int | None] = mapped_column(Integer, default=None)
    #: RESPONSES_MAX_CONCURRENT_REQUESTS_PER_TENANT for this project.
    max_concurrent_requests: Mapped[int | None] = mapped_column(Integer, default=None)
    #: RESPONSES_MAX_QUEUED_BACKGROUND_PER_TENANT for this project.
    max_queued_background: Mapped[int | None] = mapped_column(Integer, default=None)
    #: The stored-bytes quota for this project.
    max_stored_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)

    __table_args__ = (UniqueConstraint("name"),)
