"""The pool's idle-only pre-ping and the read sessions (app/db/session.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import exc

from app.db import session as db_session
from app.db.session import PING_AFTER_IDLE_S, create_engine, create_read_sessionmaker


class FakeDialect:
    def __init__(self, fails: bool = False) -> None:
        self.pings = 0
        self.fails = fails

    def do_ping(self, _: Any) -> bool:
        self.pings += 1
        if self.fails:
            raise ConnectionResetError("connection was closed in the middle of operation")
        return True


class FakeRecord:
    def __init__(self) -> None:
        self.info: dict[str, Any] = {}


def checkout(dialect: FakeDialect, record: FakeRecord) -> None:
    db_session._ping_if_idle(dialect, object(), record, None)  # type: ignore[arg-type]


def test_a_fresh_connection_and_one_in_steady_use_are_not_pinged() -> None:
    dialect, record = FakeDialect(), FakeRecord()
    checkout(dialect, record)  # fresh from connect: never checked in yet
    db_session._note_checkin(None, record)  # type: ignore[arg-type]
    checkout(dialect, record)
    assert dialect.pings == 0


def test_an_idle_connection_is_pinged_and_a_dead_one_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    dialect, record = FakeDialect(), FakeRecord()
    db_session._note_checkin(None, record)  # type: ignore[arg-type]
    later = time.monotonic() + PING_AFTER_IDLE_S + 1
    monkeypatch.setattr("app.db.session.time.monotonic", lambda: later)
    checkout(dialect, record)
    assert dialect.pings == 1
    # A failed ping is a disconnection: the pool replaces the connection instead of handing it out.
    with pytest.raises(exc.DisconnectionError):
        checkout(FakeDialect(fails=True), record)


async def test_reads_on_postgres_run_in_autocommit_and_on_sqlite_as_they_are(tmp_path: Path) -> None:
    """No BEGIN and COMMIT round trips around a Postgres read; SQLite opens no transaction for a SELECT anyway."""
    postgres = create_engine("postgresql+asyncpg://postgres@127.0.0.1:1/none")  # never connected
    sqlite = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'reads.db'}")
    try:
        reads_bind = create_read_sessionmaker(postgres).kw["bind"]
        assert reads_bind.get_execution_options()["isolation_level"] == "AUTOCOMMIT"
        assert reads_bind.pool is postgres.pool
        assert "isolation_level" not in postgres.get_execution_options()
        assert create_read_sessionmaker(sqlite).kw["bind"] is sqlite
    finally:
        await postgres.dispose()
        await sqlite.dispose()
