"""Fresh databases for integration tests: a SQLite file, or a new Postgres database on the local server."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

DEFAULT_POSTGRES_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"


def postgres_admin_url() -> str:
    return os.environ.get("RESPONSES_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


async def connect(url: str) -> asyncpg.Connection:
    """A plain asyncpg connection to the database a SQLAlchemy URL names."""
    target = make_url(url)
    return await asyncpg.connect(
        host=target.host,
        port=target.port or 5432,
        user=target.username,
        password=target.password,
        database=target.database,
    )


async def _fetch_value(url: str, statement: str) -> object:
    connection = await connect(url)
    try:
        return await connection.fetchval(statement)
    finally:
        await connection.close()


async def _execute(statement: str) -> None:
    await _fetch_value(postgres_admin_url(), statement)


def count_responses(database_url: str) -> int:
    """How many responses a Postgres test database holds."""
    count = asyncio.run(_fetch_value(database_url, "SELECT count(*) FROM responses"))
    assert isinstance(count, int)
    return count


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """A new, empty database for this test run; dropped afterwards."""
    name = f"llama_responses_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_execute(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(postgres_admin_url()).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def sqlite_url(directory: Path) -> str:
    return f"sqlite+aiosqlite:///{directory / 'responses.db'}"
