"""Migration 20261202_0012 on SQLite: projects and api_keys appear, a key's hash is unique, a project's name is
unique, and the migration downgrades cleanly."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic import command

from app.db.migrations import alembic_config

BEFORE = "20261201_0011"
REVISION = "20261202_0012"


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as database:
        return {row[0] for row in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_projects_and_keys_upgrade_with_unique_names_and_hashes_and_downgrade(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    config = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(config, BEFORE)
    assert not tables(path) & {"projects", "api_keys"}
    command.upgrade(config, REVISION)
    assert tables(path) >= {"projects", "api_keys"}
    with sqlite3.connect(path) as database:
        database.execute("PRAGMA foreign_keys=ON")
        database.execute("INSERT INTO projects (id, name, created_at) VALUES ('proj_1', 'p', '2026-12-02 00:00:00')")
        with pytest.raises(sqlite3.IntegrityError):
            database.execute("INSERT INTO projects (id, name, created_at) VALUES ('proj_2', 'p', '2026-12-02')")
        insert = (
            "INSERT INTO api_keys (id, project_id, name, role, key_hash, redacted_value, created_at)"
            " VALUES (?, ?, 'n', 'member', 'abc', 'sk-lr-x...y', '2026-12-02 00:00:00')"
        )
        database.execute(insert, ("key_1", "proj_1"))
        with pytest.raises(sqlite3.IntegrityError):
            database.execute(insert, ("key_2", "proj_1"))  # the same hash
        with pytest.raises(sqlite3.IntegrityError):
            database.execute(insert.replace("'abc'", "'def'"), ("key_3", "proj_nope"))
    command.downgrade(config, BEFORE)
    assert not tables(path) & {"projects", "api_keys"}
    command.upgrade(config, "head")
