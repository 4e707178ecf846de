"""Migration 20261130_0010 on SQLite: the files, file_chunks, batches and batch_lines tables come and go cleanly."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command

from app.db.migrations import alembic_config

BEFORE = "20261129_0009"
TABLES = {"files", "file_chunks", "batches", "batch_lines"}


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as database:
        return {name for (name,) in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_the_tables_are_created_and_dropped(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    config = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(config, BEFORE)
    assert not tables(path) & TABLES
    command.upgrade(config, "head")
    assert tables(path) >= TABLES
    with sqlite3.connect(path) as database:
        database.execute(
            "INSERT INTO files (id, tenant, purpose, filename, bytes, created_at) VALUES "
            "('file_a', 'public', 'batch', 'a.jsonl', 3, '2026-01-01 00:00:00')"
        )
        database.execute("INSERT INTO file_chunks (file_id, position, data) VALUES ('file_a', 0, x'616263')")
    command.downgrade(config, BEFORE)
    assert not tables(path) & TABLES
    command.upgrade(config, "head")
