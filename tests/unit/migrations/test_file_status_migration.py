"""Migration 20261212_0022 on SQLite: files gain `status` (`processed` for those already there, whole since they
were written in one transaction), with their chunks kept; webhook deliveries lose the excerpt of the receiver's
answer; and the migration downgrades in place, keeping both tables' rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command

from app.db.migrations import alembic_config

BEFORE = "20261211_0021"
REVISION = "20261212_0022"


def columns(path: Path, table: str) -> list[str]:
    with sqlite3.connect(path) as database:
        return [row[1] for row in database.execute(f"PRAGMA table_info({table})")]


def test_files_are_processed_and_excerpts_dropped_and_it_downgrades_keeping_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    config = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(config, BEFORE)
    with sqlite3.connect(path) as database:
        database.execute(
            "INSERT INTO files (id, tenant, purpose, filename, bytes, created_at)"
            " VALUES ('file_1', 't', 'batch', 'in.jsonl', 4, '2026-12-10 00:00:00')"
        )
        database.execute("INSERT INTO file_chunks (file_id, position, data) VALUES ('file_1', 0, x'61626364')")
        database.execute(
            "INSERT INTO webhook_deliveries (id, endpoint_id, tenant, event_id, event_type, object_id, body, status,"
            " next_attempt_at, attempts, last_response_excerpt, created_at) VALUES ('wh_1', 'we_1', 't', 'evt_1',"
            " 'response.completed', 'resp_1', '{}', 'pending', '2026-12-10 00:00:00', 1, 'a database banner',"
            " '2026-12-10 00:00:00')"
        )
    command.upgrade(config, REVISION)
    assert "last_response_excerpt" not in columns(path, "webhook_deliveries")
    with sqlite3.connect(path) as database:
        assert database.execute("SELECT id, status FROM files").fetchall() == [("file_1", "processed")]
        assert database.execute("SELECT data FROM file_chunks").fetchall() == [(b"abcd",)]
        assert database.execute("SELECT id FROM webhook_deliveries").fetchall() == [("wh_1",)]
    command.downgrade(config, BEFORE)
    assert "status" not in columns(path, "files")
    assert "last_response_excerpt" in columns(path, "webhook_deliveries")
    with sqlite3.connect(path) as database:
        assert database.execute("SELECT id FROM files").fetchall() == [("file_1",)]
        assert database.execute("SELECT data FROM file_chunks").fetchall() == [(b"abcd",)]
        assert database.execute("SELECT id FROM webhook_deliveries").fetchall() == [("wh_1",)]
