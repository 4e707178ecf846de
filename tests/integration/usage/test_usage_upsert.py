"""The usage upsert on Postgres (its INSERT ... ON CONFLICT DO UPDATE), concurrent ends of one tenant's day
included: the same rows as on SQLite (tests/unit/usage/)."""

from __future__ import annotations

import asyncio

import pytest
from alembic import command

from app.db.migrations import alembic_config
from app.testing.databases import fresh_postgres_database
from tests.unit.usage.test_usage_counting import EXPECTED, upsert_twice_and_read

pytestmark = pytest.mark.integration


def test_the_upsert_adds_to_a_day_on_postgres() -> None:
    with fresh_postgres_database() as url:
        command.upgrade(alembic_config(url), "head")
        assert asyncio.run(upsert_twice_and_read(url)) == EXPECTED
