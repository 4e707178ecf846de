"""A database as every process reaches it: its engine and sessions (built in the lifespan or a worker's start-up,
never at import time), and the one way services open a unit of work."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.engine import Dialect, ExceptionContext
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from app.observability.metrics import DATABASE_ERRORS

SQLITE_BUSY_TIMEOUT_S = 30
# NOTE: connections are kept, never opened per request: under load, SQLAlchemy's default overflow connections
# were opened and closed for each request, which cut GET throughput twentyfold. Requests beyond the pool wait.
SQLITE_POOL_SIZE = 8
POSTGRES_POOL_SIZE = 20
#: A pooled Postgres connection idle longer than this is pinged before use (one that has died with a restart of
#: Postgres is replaced, unseen by the request); one in steady use is not.
PING_AFTER_IDLE_S = 1.0
_CHECKED_IN_AT = "checked_in_at"


def _count_error(_: ExceptionContext) -> None:
    DATABASE_ERRORS.inc()


def create_engine(database_url: str) -> AsyncEngine:
    if not database_url.startswith("sqlite"):
        # LIFO: under light load the same few connections serve every request, and the rest stay idle (and are
        # pinged when next needed) rather than each being used just often enough to go unpinged.
        engine = create_async_engine(database_url, pool_size=POSTGRES_POOL_SIZE, max_overflow=0, pool_use_lifo=True)
        event.listen(engine.sync_engine.pool, "checkin", _note_checkin)
        event.listen(engine.sync_engine.pool, "checkout", partial(_ping_if_idle, engine.dialect))
    else:
        engine = create_async_engine(
            database_url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S}, pool_size=SQLITE_POOL_SIZE, max_overflow=0
        )
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    # Every failed statement or connection, whichever code ran it: the database errors metric.
    event.listen(engine.sync_engine, "handle_error", _count_error)
    return engine


def _note_checkin(_: Any, record: ConnectionPoolEntry) -> None:
    record.info[_CHECKED_IN_AT] = time.monotonic()


def _ping_if_idle(dialect: Dialect, dbapi_connection: Any, record: ConnectionPoolEntry, _: Any) -> None:
    """The pool's pre-ping, for idle connections only.

    NOTE: in place of `pool_pre_ping`, which pinged on every checkout: three round trips on asyncpg (BEGIN, the
    ping, ROLLBACK) that were half of a GET's. A connection in steady use that Postgres dropped fails its request
    instead (a 503, as during an outage) and makes the pool replace every connection opened before it.
    """
    checked_in_at = record.info.get(_CHECKED_IN_AT)
    if checked_in_at is None or time.monotonic() - checked_in_at < PING_AFTER_IDLE_S:
        return  # fresh from connect, or in steady use
    try:
        dialect.do_ping(dbapi_connection)
    except Exception as error:
        # The pool reconnects this entry and checks it out again; a failed reconnect reaches the caller.
        raise exc.DisconnectionError(f"pre-ping failed: {error}") from error


def _sqlite_pragmas(connection: Any, _: Any) -> None:
    # WAL lets readers (GET, input_items) go on while a generation writes; foreign keys for cascades.
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def create_read_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions for requests that only read (GET a response, the list): no transaction to open or commit.

    On Postgres the connection is in autocommit, so a read is its statements alone, with no BEGIN and COMMIT
    round trips; each statement sees the latest committed state. SQLite starts no transaction for a SELECT
    anyway (and setting autocommit there would cost two thread hops to the driver's thread per request).
    """
    if engine.dialect.name == "postgresql":
        engine = engine.execution_options(isolation_level="AUTOCOMMIT")
    return async_sessionmaker(engine, expire_on_commit=False)


@dataclass(frozen=True, slots=True)
class Database:
    """One database. Services open their own units of work here, never receiving a session: `transaction()`
    commits on success and rolls back on error, `read()` opens no transaction (create_read_sessionmaker);
    repositories take the session either gives."""

    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    read_sessionmaker: async_sessionmaker[AsyncSession]

    @classmethod
    def connect(cls, database_url: str) -> Database:
        engine = create_engine(database_url)
        return cls(engine, create_sessionmaker(engine), create_read_sessionmaker(engine))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """One unit of work: committed when the block ends, rolled back when it raises."""
        async with self.sessionmaker() as session, session.begin():
            yield session

    def read(self) -> AsyncSession:
        """A session for reads only (`async with database.read() as session`): no BEGIN, no COMMIT."""
        return self.read_sessionmaker()

    def read_connection(self) -> AsyncConnection:
        """A connection for a Core read (`async with database.read_connection() as connection`), as read() but
        with no ORM session around it: the cached GET's one-column check, run on every read."""
        engine: AsyncEngine = self.read_sessionmaker.kw["bind"]
        return engine.connect()

    async def dispose(self) -> None:
        await self.engine.dispose()
