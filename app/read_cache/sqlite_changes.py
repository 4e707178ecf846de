"""SQLite's counterpart of listener.py: a SQLite database is written by the one server that serves it (embedded
mode), so its own writes are the changes there are to hear. Each connection the engine opens gets temporary
triggers that call back into this process for every changed `responses` row; the cache hears of the rows a unit
of work changed when its connection goes back to the pool, after its commit (before it, readers still see the
old row, which is then still the truth). Another process writing the file (the operator CLI's `prune`) is not
heard: what it changes shows within the cache's staleness bound."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import ConnectionPoolEntry

from app.read_cache.cache import ResponseJsonCache

logger = logging.getLogger(__name__)

FUNCTION = "llama_responses_changed"
_CHANGED = "llama_responses_changed_rows"
TEMP_TRIGGERS = [
    f"CREATE TEMP TRIGGER IF NOT EXISTS llama_responses_{operation.lower()} AFTER {operation} ON main.responses "
    f"BEGIN SELECT {FUNCTION}({row}.id, {row}.tenant); END"
    for operation, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD"))
]


def hear_own_changes(engine: AsyncEngine, cache: ResponseJsonCache) -> None:
    """Hook every connection `engine` opens from now on (call it before the engine's first query), and let
    `cache` trust its entries. A connection that cannot have the triggers (no `responses` table yet) stops that
    for good: the cache checks every read again."""

    unheard: list[str] = []  # why a connection could not be hooked, once one could not

    def connected(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        if unheard:
            return
        changed: list[tuple[str, str]] = []
        record.info[_CHANGED] = changed
        # Called in the driver's thread, inside the statement: only noted here (list.append is atomic).
        dbapi_connection.create_function(FUNCTION, 2, lambda response_id, tenant: changed.append((tenant, response_id)))
        cursor = dbapi_connection.cursor()
        try:
            for statement in TEMP_TRIGGERS:
                cursor.execute(statement)
        except sqlite3.OperationalError as error:
            logger.warning("the read cache cannot hear this database's changes (%s): every read checks it", error)
            unheard.append(str(error))
            cache.stop_listening()
        finally:
            cursor.close()

    def checked_in(_: Any, record: ConnectionPoolEntry) -> None:
        changed: list[tuple[str, str]] = record.info.get(_CHANGED, [])
        while changed:
            cache.changed(*changed.pop())

    event.listen(engine.sync_engine, "connect", connected)
    event.listen(engine.sync_engine.pool, "checkin", checked_in)
    cache.start_listening()
