"""The `idempotency_keys` table: each tenant's Idempotency-Keys while they are remembered, with a hash of the
request that first sent each (never the request itself) and what it answered (sealed: a key's or a webhook
secret's one showing may be in it), or the response it created."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now

#: The most characters a key may have (as the payment APIs that defined the header allow).
MAX_KEY_CHARS = 255


class IdempotencyKeyRow(Base):
    __tablename__ = "idempotency_keys"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(MAX_KEY_CHARS), primary_key=True)
    #: SHA-256 (hex) of the request's method, path, query and body: the same key with another request is a 409.
    request_hash: Mapped[str] = mapped_column(String(64))
    #: Which request holds the key now: only it may finish or release it (a retry may take an abandoned one over).
    claim_id: Mapped[str] = mapped_column(String(64))
    #: running (its request has not answered yet) or done.
    state: Mapped[str] = mapped_column(String(16))
    #: The response a create made (its id fixed when the key was claimed); NULL for the other creates.
    resource_id: Mapped[str | None] = mapped_column(String(64), default=None)
    #: The other creates' answer, status and body, sealed for the tenant (app/secrets); NULL while running.
    answer: Mapped[str | None] = mapped_column(Text, default=None)
    #: HTTP status of the answer (every create answers 200 today; kept so that a replay says the same).
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    claimed_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    #: The end of the key's window: a later request with it is a new create, and retention deletes the row.
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (Index("ix_idempotency_keys_expires_at", "expires_at"),)
