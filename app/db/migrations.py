"""Alembic driven from code: upgrade to head, tell whether a database is at head, and run a command's work on a
prepared database."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config import Settings
from app.db.session import Database, create_engine

T = TypeVar("T")

# NOTE: migrations/ sits at the repository root (STYLE.md's layout); the project installs editable.
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade_to_head(database_url: str) -> None:
    """Blocking: runs Alembic (which runs its own event loop), so call it off any running loop."""
    command.upgrade(alembic_config(database_url), "head")


def head_revision(database_url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()


async def current_revision(engine: AsyncEngine) -> str | None:
    def _read(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as connection:
        return await connection.run_sync(_read)


async def upgrade_to_head_async(database_url: str) -> None:
    await asyncio.to_thread(upgrade_to_head, database_url)


class SchemaOutOfDate(RuntimeError):
    pass


async def prepare_database(settings: Settings) -> None:
    """SQLite upgrades itself so that the first run just works; Postgres must be migrated on purpose."""
    if settings.is_sqlite:
        await upgrade_to_head_async(settings.database_url)
        return
    engine = create_engine(settings.database_url)
    try:
        current = await current_revision(engine)
    finally:
        await engine.dispose()
    head = head_revision(settings.database_url)
    if current != head:
        raise SchemaOutOfDate(
            f"the database schema is at {current or 'nothing'}, not {head}: run `llama-responses migrate` first"
        )


def run_with_database(work: Callable[[Database], Awaitable[T]], settings: Settings) -> T:
    """Blocking: `work` on the configured database, prepared first (the operator CLI's commands)."""

    async def run() -> T:
        await prepare_database(settings)
        database = Database.connect(settings.database_url)
        try:
            return await work(database)
        finally:
            await database.dispose()

    return asyncio.run(run())
