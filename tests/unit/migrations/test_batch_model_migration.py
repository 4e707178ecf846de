"""Migration 20261204_0014 on SQLite: batches gain a nullable `model` column, a batch stored before keeps its row
(model NULL), and the column goes again on downgrade."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command

from app.db.migrations import alembic_config

BEFORE = "20261203_0013"


def columns(path: Path) -> set[str]:
    with sqlite3.connect(path) as database:
        return {row[1] for row in database.execute("PRAGMA table_info(batches)")}


def test_the_model_column_comes_and_goes(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    config = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(config, BEFORE)
    assert "model" not in columns(path)
    with sqlite3.connect(path) as database:
        database.execute(
            "INSERT INTO batches (id, tenant, status, endpoint, completion_window, input_file_id, total, completed,"
            " failed, input_tokens, cached_tokens, output_tokens, reasoning_tokens, created_at, expires_at) VALUES"
            " ('batch_a', 'public', 'in_progress', '/v1/responses', '24h', 'file_a', 0, 0, 0, 0, 0, 0, 0,"
            " '2026-01-01 00:00:00', '2026-01-02 00:00:00')"
        )
    command.upgrade(config, "head")
    assert "model" in columns(path)
    with sqlite3.connect(path) as database:
        assert database.execute("SELECT id, model FROM batches").fetchall() == [("batch_a", None)]
    command.downgrade(config, BEFORE)
    assert "model" not in columns(path)
    with sqlite3.connect(path) as database:
        assert database.execute("SELECT id FROM batches").fetchall() == [("batch_a",)]
