"""Migration 20261125_0005 on SQLite: a response in progress from before it gets no lease (so reconciliation
counts it expired) and no attempts; and it downgrades cleanly, the responses' events kept."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from alembic import command

from app.db.migrations import alembic_config
from app.db.session import create_engine, create_sessionmaker
from app.jobs import repository as jobs

BEFORE = "20261124_0004"
REVISION = "20261125_0005"
NEW_COLUMNS = {"lease_owner", "lease_expires_at", "cancel_requested_at", "attempts", "progress"}


def columns(path: Path) -> set[str]:
    with sqlite3.connect(path) as database:
        return {row[1] for row in database.execute("PRAGMA table_info(responses)")}


async def expired_rows(url: str) -> list[tuple[str, int, str | None]]:
    engine = create_engine(url)
    try:
        async with create_sessionmaker(engine)() as session:
            expired = await jobs.expired_leases(session, limit=10)
            return [(row.id, row.attempts, row.lease_owner) for row in expired]
    finally:
        await engine.dispose()


def test_old_in_progress_rows_count_as_expired_and_the_migration_downgrades(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite+aiosqlite:///{path}"
    config = alembic_config(url)
    command.upgrade(config, BEFORE)
    with sqlite3.connect(path) as database:
        database.execute(
            "INSERT INTO responses (id, tenant, status, model, background, stream, params, output, created_at,"
            " updated_at) VALUES ('resp_old', 'public', 'in_progress', 'm', 1, 0, '{}', '[]',"
            " '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
        )
        database.execute(
            "INSERT INTO response_events (response_id, sequence_number, event) VALUES ('resp_old', 0, '{}')"
        )
    command.upgrade(config, REVISION)
    assert columns(path) >= NEW_COLUMNS
    command.upgrade(config, "head")  # the ORM reads the table as the newest revision has it
    assert asyncio.run(expired_rows(url)) == [("resp_old", 0, None)]
    command.downgrade(config, BEFORE)
    assert not columns(path) & NEW_COLUMNS
    # The downgrade alters the table in place: a rebuild would cascade-delete its events (foreign keys are on).
    with sqlite3.connect(path) as database:
        assert database.execute("SELECT count(*) FROM responses").fetchone() == (1,)
        assert database.execute("SELECT count(*) FROM response_events").fetchone() == (1,)
    command.upgrade(config, "head")
