"""The measure of stored bytes on Postgres (its CAST of JSON to text, its joins and grouping; the counters' upserts
and conditional updates): the same figures as on SQLite (tests/unit/quotas/), and the charge's row lock."""

from __future__ import annotations

import asyncio

import pytest
from alembic import command

from app.db.migrations import alembic_config
from app.db.session import Database
from app.quotas import repository
from app.testing.databases import fresh_postgres_database
from tests.unit.quotas.test_measuring import TENANT_A, check_measures, seed_and_measure

pytestmark = pytest.mark.integration


def test_the_measure_counts_each_table_on_postgres() -> None:
    with fresh_postgres_database() as url:
        command.upgrade(alembic_config(url), "head")
        check_measures(*asyncio.run(seed_and_measure(url)))


async def charge_at_once(url: str) -> list[int]:
    """Ten charges of one tenant in ten concurrent units of work: each sees the ones committed before it."""
    database = Database.connect(url)

    async def one() -> int:
        async with database.transaction() as session:
            total = await repository.charge(session, TENANT_A, 100)
            await asyncio.sleep(0.01)  # held until the commit: the next charge waits for it
            return total

    try:
        return sorted(await asyncio.gather(*(one() for _ in range(10))))
    finally:
        await database.dispose()


def test_concurrent_charges_of_a_tenant_each_see_the_others() -> None:
    with fresh_postgres_database() as url:
        command.upgrade(alembic_config(url), "head")
        assert asyncio.run(charge_at_once(url)) == [100 * (index + 1) for index in range(10)]
