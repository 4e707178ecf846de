"""Migration 20261126_0006 on SQLite: the progress a running generation stored whole (one JSON column) becomes
the first row of its append-only progress, so a takeover across the upgrade continues from it; and it downgrades
back to the column, joined, cleanly, without touching the tables that reference `responses`."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from alembic import command

from app.db.migrations import alembic_config
from app.db.session import create_engine, create_sessionmaker
from app.jobs import repository as jobs

BEFORE = "20261125_0005"
PROGRESS = {"pieces": ["Once", " upon"], "ids": ["msg_1"]}


def columns(path: Path) -> set[str]:
    with sqlite3.connect(path) as database:
        return {row[1] for row in database.execute("PRAGMA table_info(responses)")}


async def stored_progress(url: str) -> jobs.Progress | None:
    engine = create_engine(url)
    try:
        async with create_sessionmaker(engine)() as session:
            return await jobs.progress_of(session, "resp_running")
    finally:
        await engine.dispose()


def test_stored_progress_survives_the_upgrade_and_the_downgrade(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite+aiosqlite:///{path}"
    config = alembic_config(url)
    command.upgrade(config, BEFORE)
    with sqlite3.connect(path) as database:
        database.execute(
            "INSERT INTO responses (id, tenant, status, model, background, stream, params, output, created_at,"
            " updated_at, attempts, progress) VALUES ('resp_running', 'public', 'in_progress', 'm', 1, 1, '{}', '[]',"
            " '2026-01-01 00:00:00', '2026-01-01 00:00:00', 1, ?)",
            (json.dumps(PROGRESS),),
        )
        database.execute(
            "INSERT INTO response_events (response_id, sequence_number, event) VALUES ('resp_running', 0, '{}')"
        )
    command.upgrade(config, "head")
    assert "progress" not in columns(path)
    with sqlite3.connect(path) as database:  # the column dropped in place: nothing cascaded from a table rebuild
        assert database.execute("SELECT count(*) FROM response_events").fetchone() == (1,)
    assert asyncio.run(stored_progress(url)) == jobs.Progress(pieces=["Once", " upon"], ids=["msg_1"], rows=1)
    # A second run appends after it; the downgrade joins the rows back into the column.
    with sqlite3.connect(path) as database:
        database.execute(
            "INSERT INTO generation_progress (response_id, position, pieces, ids) VALUES (?, 1, ?, ?)",
            ("resp_running", json.dumps([" a", " time"]), json.dumps(["msg_2"])),
        )
    command.downgrade(config, BEFORE)
    with sqlite3.connect(path) as database:
        (progress,) = database.execute("SELECT progress FROM responses WHERE id = 'resp_running'").fetchone()
        tables = {row[0] for row in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert json.loads(progress) == {"pieces": ["Once", " upon", " a", " time"], "ids": ["msg_1", "msg_2"]}
    assert "generation_progress" not in tables
    command.upgrade(config, "head")
    assert asyncio.run(stored_progress(url)) == jobs.Progress(
        pieces=["Once", " upon", " a", " time"], ids=["msg_1", "msg_2"], rows=1
    )
