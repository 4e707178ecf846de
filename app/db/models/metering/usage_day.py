"""The `usage` table: what one tenant used of one model on one UTC day, as counters that each response's end adds
to (app/usage/repository.py)."""

from __future__ import annotations

from datetime import date

from sqlalchemy import BigInteger, Date, Float, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base


class UsageDayRow(Base):
    __tablename__ = "usage"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    model: Mapped[str] = mapped_column(String(256), primary_key=True)
    #: The UTC day the responses were created on.
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    #: Responses created (and ended: a response is counted once, at its end, whatever its status).
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    #: Of the input tokens, those read from reused KV state (the Response's input_tokens_details.cached_tokens).
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    #: Wall time of the generations, from the start of the final run's prefill to its end (queue wait excluded).
    generation_s: Mapped[float] = mapped_column(Float, default=0.0)

    __table_args__ = (
        #: Retention (rows before a day) and an admin's report across tenants (a range of days).
        Index("ix_usage_day", "day"),
    )
