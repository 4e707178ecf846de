"""Migration 20261209_0019 on SQLite: responses gain `steer_requested_at` (NULL for those already there), and the
migration downgrades in place, keeping the responses and their events."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command

from app.db.migrations import alembic_config

BEFORE = "20261208_0018"
REVISION = "20261209_0019"


def columns(path: Path) -> list[str]:
    with sqlite3.connect(path) as database:
        return [row[1] for row in database.execute("PRAGMA table_info(responses)")]


def test_steer_requested_at_upgrades_as_null_and_downgrades_keeping_the_responses(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    config = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(config, BEFORE)
    assert "steer_requested_at" not in columns(path)
    with sqlite3.connect(path) as database:
        database.execute(
            "INSERT INTO responses (id, tenant, status, model, background, stream, params, output, created_at,"
            " updated_at, attempts, job_class) VALUES ('resp_1', 't', 'in_progress', 'm', 0, 1, '{}', '[]',"
            " '2026-12-08 00:00:00', '2026-12-08 00:00:00', 1, 'interactive')"
        )
    command.upgrade(config, REVISION)
    with sqlite3.connect(path) as database:
        assert database.execute("SELECT steer_requested_at FROM responses").fetchall() == [(None,)]
        database.execute("UPDATE responses SET steer_requested_at = '2026-12-08 00:00:01'")
    command.downgrade(config, BEFORE)
    assert "steer_requested_at" not in columns(path)
    with sqlite3.connect(path) as database:
        assert database.execute("SELECT id, status FROM responses").fetchall() == [("resp_1", "in_progress")]
