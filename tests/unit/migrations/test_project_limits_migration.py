"""Migration 20261206_0016 on SQLite: a project gains its own limits, NULL (the server's settings) for the
projects already there, and the migration downgrades cleanly, keeping the projects and their keys."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command

from app.db.migrations import alembic_config

BEFORE = "20261205_0015"
REVISION = "20261206_0016"
LIMITS = ["requests_per_min", "tokens_per_min", "max_concurrent_requests", "max_queued_background", "max_stored_bytes"]


def columns(path: Path) -> list[str]:
    with sqlite3.connect(path) as database:
        return [row[1] for row in database.execute("PRAGMA table_info(projects)")]


def test_project_limits_upgrade_as_nulls_and_downgrade_keeping_the_projects(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    config = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(config, BEFORE)
    assert not set(columns(path)) & set(LIMITS)
    with sqlite3.connect(path) as database:
        database.execute("INSERT INTO projects (id, name, created_at) VALUES ('proj_1', 'p', '2026-12-06 00:00:00')")
        database.execute(
            "INSERT INTO api_keys (id, project_id, name, role, key_hash, redacted_value, created_at)"
            " VALUES ('key_1', 'proj_1', 'n', 'member', 'abc', 'sk-lr-x...y', '2026-12-06 00:00:00')"
        )
    command.upgrade(config, REVISION)
    assert columns(path)[-len(LIMITS) :] == LIMITS
    with sqlite3.connect(path) as database:
        assert database.execute(f"SELECT {', '.join(LIMITS)} FROM projects").fetchall() == [(None,) * len(LIMITS)]
        database.execute("UPDATE projects SET requests_per_min = 5, max_stored_bytes = ?", (2**40,))
        assert database.execute("SELECT max_stored_bytes FROM projects").fetchone() == (2**40,)
    command.downgrade(config, BEFORE)
    assert not set(columns(path)) & set(LIMITS)
    with sqlite3.connect(path) as database:
        assert database.execute("SELECT id, name FROM projects").fetchall() == [("proj_1", "p")]
        assert database.execute("SELECT id FROM api_keys").fetchall() == [("key_1",)]
    command.upgrade(config, "head")
    assert set(LIMITS) <= set(columns(path))
