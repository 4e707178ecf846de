"""On Postgres, migrated by Alembic: the webhook tables exist as the models say, and processes claiming due
deliveries at once (the due ones picked fairly, locked with FOR UPDATE SKIP LOCKED, then the conditional update) never
share an attempt and leave none behind."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from app.db import migrations
from app.db.base import utc_now
from app.db.models import WebhookEndpointRow
from app.db.session import Database
from app.testing.databases import fresh_postgres_database
from app.webhooks import repository
from app.webhooks.outbox import record_event

pytestmark = pytest.mark.integration

DELIVERIES = 120
CLAIMERS = 4


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with fresh_postgres_database() as url:
        migrations.upgrade_to_head(url)
        yield url


async def test_concurrent_claimers_share_no_attempt_and_miss_none(postgres_url: str) -> None:
    setup = Database.connect(postgres_url)
    now = utc_now()
    async with setup.transaction() as session:
        await repository.insert_endpoint(
            session,
            WebhookEndpointRow(
                id="we_pg",
                tenant="t",
                name="n",
                url="https://example.com/hook",
                event_types=["batch.completed"],
                status="enabled",
                sealed_secret="sealed",
                signing_secret_hint="whsec_...abcd",
                created_at=now,
                updated_at=now,
            ),
        )
        for index in range(DELIVERIES):
            await record_event(session, tenant="t", event_type="batch.completed", object_id=f"batch_{index}")
    await setup.dispose()

    async def claimer(number: int) -> list[str]:
        database = Database.connect(postgres_url)
        taken: list[str] = []
        try:
            while True:
                async with database.transaction() as session:
                    due = await repository.due_fairly(session, bounds=repository.ClaimBounds(7, 7, 7))
                    claimed = await repository.claim(
                        session, [found[0] for found in due], token=f"claimer-{number}-{len(taken)}", claim_s=600
                    )
                if not due:
                    return taken
                # Another claimer may hold the rows this one picked (SKIP LOCKED): it gets none and goes on.
                taken.extend(row.id for row in claimed)
                await asyncio.sleep(0)
        finally:
            await database.dispose()

    results = await asyncio.gather(*(claimer(number) for number in range(CLAIMERS)))
    every = [delivery for taken in results for delivery in taken]
    assert len(every) == DELIVERIES and len(set(every)) == DELIVERIES
    assert sum(1 for taken in results if taken) >= 2  # they really ran side by side
