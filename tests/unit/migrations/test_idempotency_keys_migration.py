"""Migration 20261211_0021 on SQLite: the idempotency_keys table as the ORM model describes it, and a downgrade
that drops it alone (Postgres runs the same migration in the integration and distributed suites)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine

from app.db.base import Base
from app.db.migrations import alembic_config

BEFORE = "20261210_0020"
REVISION = "20261211_0021"


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as database:
        return {row[0] for row in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_the_table_is_the_models_and_goes_with_a_downgrade(tmp_path: Path) -> None:
    path = tmp_path / "keys.db"
    config = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(config, REVISION)
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as connection:
        context = MigrationContext.configure(connection)
        differences = [diff for diff in compare_metadata(context, Base.metadata) if "idempotency_keys" in str(diff)]
    engine.dispose()
    assert differences == []
    command.downgrade(config, BEFORE)
    assert "idempotency_keys" not in tables(path) and "responses" in tables(path)
