"""Engine and sessionmaker construction (called from the lifespan, never at import time)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from app.observability.metrics import DATABASE_ERRORS

SQLITE_BUSY_TIMEOUT_S = 30
# NOTE: connections are kept, never opened per request: under load, SQLAlchemy's default overflow connections
# were opened and closed for each request, which cut GET throughput twentyfold. Requests beyond the pool wait.
SQLITE_POOL_SIZE = 8
POSTGRES_POOL_SIZE = 20


def _count_error(_: ExceptionContext) -> None:
    DATABASE_ERRORS.inc()


def create_engine(database_url: str) -> AsyncEngine:
    if not database_url.startswith("sqlite"):
        engine = create_async_engine(database_url, pool_pre_ping=True, pool_size=POSTGRES_POOL_SIZE, max_overflow=0)
    else:
        engine = create_async_engine(
            database_url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S}, pool_size=SQLITE_POOL_SIZE, max_overflow=0
        )
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    # Every failed statement or connection, whichever code ran it: the database errors metric.
    event.listen(engine.sync_engine, "handle_error", _count_error)
    return engine


def _sqlite_pragmas(connection: Any, _: Any) -> None:
    # WAL lets readers (GET, input_items) go on while a generation writes; foreign keys for cascades.
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)
