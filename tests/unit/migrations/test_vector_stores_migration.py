"""Migration 20261213_0023 on SQLite: the vector stores' tables and the chunks' FTS5 index, kept by triggers (a
chunk inserted is found, a chunk deleted is not), come and go cleanly. (Postgres's generated tsvector column: the
distributed integration tests search through it.)"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command

from app.db.migrations import alembic_config

BEFORE = "20261212_0022"
TABLES = {"vector_stores", "vector_store_files", "vector_store_file_batches", "vector_store_chunks"}


def names(path: Path, kind: str) -> set[str]:
    with sqlite3.connect(path) as database:
        return {name for (name,) in database.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,))}


def test_the_tables_and_the_full_text_index_come_and_go(tmp_path: Path) -> None:
    path = tmp_path / "vs.db"
    config = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(config, "head")
    assert TABLES | {"vector_store_chunks_fts"} <= names(path, "table")
    with sqlite3.connect(path) as database:
        database.execute(
            "INSERT INTO vector_stores (id, tenant, name, created_at, last_active_at) VALUES "
            "('vs_a', 't', 'n', '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
        )
        for position, text in enumerate(["Tomatoes need sun", "Taxes are due in April"]):
            database.execute(
                "INSERT INTO vector_store_chunks (vector_store_id, file_id, position, text) VALUES ('vs_a', 'f', ?, ?)",
                (position, text),
            )
        match = "SELECT rowid FROM vector_store_chunks_fts WHERE vector_store_chunks_fts MATCH ?"
        # Stemmed: "tomato" finds "Tomatoes".
        assert database.execute(match, ("tomato",)).fetchall() == [(1,)]
        database.execute("DELETE FROM vector_store_chunks WHERE id = 1")
        assert database.execute(match, ("tomato",)).fetchall() == []
        assert database.execute(match, ("taxes",)).fetchall() == [(2,)]
    command.downgrade(config, BEFORE)
    assert not (TABLES | {"vector_store_chunks_fts"}) & names(path, "table")
    assert not {"vector_store_chunks_fts_insert", "vector_store_chunks_fts_delete"} & names(path, "trigger")
