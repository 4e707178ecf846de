"""The database's clock, as SQL, for what processes on several hosts judge by time (a lease's expiry): written
and compared inside the statement itself, so that no host's clock, running fast or slow, decides who owns what.

Postgres: `statement_timestamp()`, the moment the statement began. Not `now()`: that is the transaction's start,
so a write made late in a long transaction (a heartbeat's, after a wait for a lock) would store an expiry already
partly spent, and a claim would judge leases by a moment that has passed. Not `clock_timestamp()`: it is volatile,
a new instant at each call within one statement (every row compared against another moment), and a volatile
value cannot bound an index scan (`ix_responses_status_lease_expires_at`). statement_timestamp() is fresh for each
statement and stable within it.

SQLite: this process's clock, as a bound value. Embedded mode is one process on one host, whose clock is the
database's; and SQLite's own `'now'` is formatted otherwise than the timestamps SQLAlchemy stores there (text
compared as text), so comparing the two would be wrong where it matters.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, DateTime, Interval, func, literal
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import UtcDateTime, utc_now


def _on_postgres(session: AsyncSession) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def database_now(session: AsyncSession) -> ColumnElement[datetime]:
    """Now, by the clock of the database `session` talks to (see the module's note)."""
    return database_in(session, 0.0)


def database_in(session: AsyncSession, seconds: float) -> ColumnElement[datetime]:
    """`seconds` from now (negative: ago), by the clock of the database `session` talks to."""
    if _on_postgres(session):
        now: ColumnElement[datetime] = func.statement_timestamp(type_=DateTime(timezone=True))
        if seconds == 0:
            return now
        return now + literal(timedelta(seconds=seconds), Interval())
    return literal(utc_now() + timedelta(seconds=seconds), UtcDateTime())
