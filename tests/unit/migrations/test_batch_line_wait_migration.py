"""Migration 20261215_0025 on SQLite: batch lines gain a nullable `wait_until` (a line paced by a rate limit
waits until then), a line stored before keeps its row (NULL: not waiting), and the column goes again on
downgrade, the line still there (in place: a rebuild would drop nothing, but nor may it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command

from app.db.migrations import alembic_config

BEFORE = "20261214_0024_reads"


def columns(path: Path) -> set[str]:
    with sqlite3.connect(path) as database:
        return {row[1] for row in database.execute("PRAGMA table_info(batch_lines)")}


def test_the_wait_until_column_comes_and_goes(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    config = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(config, BEFORE)
    assert "wait_until" not in columns(path)
    with sqlite3.connect(path) as database:
        database.execute(
            "INSERT INTO batches (id, tenant, status, endpoint, completion_window, input_file_id, total, completed,"
            " failed, input_tokens, cached_tokens, output_tokens, reasoning_tokens, created_at, expires_at) VALUES"
            " ('batch_a', 'public', 'in_progress', '/v1/responses', '24h', 'file_a', 1, 0, 0, 0, 0, 0, 0,"
            " '2026-01-01 00:00:00', '2026-01-02 00:00:00')"
        )
        database.execute(
            "INSERT INTO batch_lines (batch_id, line, id, custom_id, response_id, body, keep_response, state) VALUES"
            " ('batch_a', 1, 'batch_req_a', 'a', 'resp_a', '{}', 1, 'pending')"
        )
    command.upgrade(config, "head")
    assert "wait_until" in columns(path)
    with sqlite3.connect(path) as database:
        assert database.execute("SELECT id, wait_until FROM batch_lines").fetchall() == [("batch_req_a", None)]
    command.downgrade(config, BEFORE)
    assert "wait_until" not in columns(path)
    with sqlite3.connect(path) as database:
        assert database.execute("SELECT id, state FROM batch_lines").fetchall() == [("batch_req_a", "pending")]
