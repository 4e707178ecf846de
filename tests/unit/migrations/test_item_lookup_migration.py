"""Migration 20261124_0004 on SQLite: responses stored before it get their output items indexed, so that
item_reference finds them; and it downgrades cleanly."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command

from app.db.migrations import alembic_config

BEFORE = "20261123_0002"


def test_existing_outputs_are_indexed_and_the_migration_downgrades(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    config = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(config, BEFORE)
    with sqlite3.connect(path) as database:
        database.execute(
            "INSERT INTO responses (id, tenant, status, model, background, stream, params, output, created_at,"
            " updated_at) VALUES ('resp_old', 'public', 'completed', 'm', 0, 0, '{}',"
            ' \'[{"id": "msg_a", "type": "message"}, {"id": "fc_b", "type": "function_call"}]\','
            " '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
        )
    command.upgrade(config, "head")
    with sqlite3.connect(path) as database:
        rows = database.execute("SELECT response_id, position, item_id FROM output_items ORDER BY position").fetchall()
    assert rows == [("resp_old", 0, "msg_a"), ("resp_old", 1, "fc_b")]
    command.downgrade(config, BEFORE)
    with sqlite3.connect(path) as database:
        tables = {name for (name,) in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not tables & {"conversations", "conversation_items", "output_items", "server_secrets"}
    command.upgrade(config, "head")
