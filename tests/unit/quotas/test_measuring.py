"""The measure of stored bytes: one query a table, each tenant's rows counted (a child table's through its parent),
every table that holds a tenant's data measured; the measurement replaces the counters; the migration, up and
down. The same measure on Postgres: tests/integration/quotas/."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from alembic import command

from app.db.base import Base, utc_now
from app.db.migrations import alembic_config, upgrade_to_head_async
from app.db.models import (
    BatchLineRow,
    BatchRow,
    ConversationItemRow,
    ConversationRow,
    FileChunkRow,
    FileRow,
    GenerationProgressRow,
    InputItemRow,
    OutputItemRow,
    ResponseEventRow,
    ResponseRow,
    VectorStoreChunkRow,
    VectorStoreFileRow,
    VectorStoreRow,
    WebhookDeliveryRow,
    WebhookEndpointRow,
)
from app.db.session import Database
from app.quotas import repository
from app.quotas.stored_bytes import measure_stored_bytes

#: The tables that hold no tenant's data: none of their bytes is a tenant's to count.
NOT_MEASURED = {
    "api_keys",
    "projects",
    "server_secrets",
    "usage",
    "tenant_storage",
    # Ids and moments only (a batch's files are measured as vector_store_files).
    "vector_store_file_batches",
    # A key's record: its request's hash and what it created, forgotten when its window ends.
    "idempotency_keys",
}
#: Each table's payload for tenant A, a different length each: a table counted twice or not at all shows.
PAYLOAD = {table: 1000 * (index + 1) for index, table in enumerate(sorted(repository.MEASURES))}
TENANT_A = "project:a"
TENANT_B = "project:b"


def text(table: str) -> str:
    return "x" * PAYLOAD[table]


def tenant_a_rows() -> list[Base]:
    """One row in each measured table, each holding its table's payload (plus what the row needs besides)."""
    now = utc_now()
    return [
        ResponseRow(id="resp_a", tenant=TENANT_A, status="completed", model="m", params={"p": text("responses")}),
        InputItemRow(response_id="resp_a", position=0, item_id="in_a", item={"t": text("input_items")}),
        OutputItemRow(response_id="resp_a", position=0, item_id=text("output_items")[:64]),
        ResponseEventRow(response_id="resp_a", sequence_number=0, event={"e": text("response_events")}),
        GenerationProgressRow(response_id="resp_a", position=0, pieces=[text("generation_progress")], ids=[]),
        ConversationRow(id="conv_a", tenant=TENANT_A, metadata_={"m": text("conversations")}),
        ConversationItemRow(conversation_id="conv_a", position=0, item_id="ci", item={"t": text("conversation_items")}),
        FileRow(id="file_a", tenant=TENANT_A, purpose="batch", filename="f", bytes=PAYLOAD["files"]),
        # The chunk is not read: its file's `bytes` counts it.
        FileChunkRow(file_id="file_a", position=0, data=b"\0" * PAYLOAD["files"]),
        BatchRow(
            id="batch_a",
            tenant=TENANT_A,
            status="completed",
            endpoint="/v1/responses",
            completion_window="24h",
            input_file_id="file_a",
            metadata_={"m": text("batches")},
            expires_at=now + timedelta(days=1),
        ),
        BatchLineRow(
            batch_id="batch_a", line=1, id="br", custom_id="c", response_id="r", body={"b": text("batch_lines")}
        ),
        WebhookEndpointRow(
            id="we_a",
            tenant=TENANT_A,
            name="n",
            url="https://example.com/" + text("webhook_endpoints"),
            sealed_secret="s",
            signing_secret_hint="h",
        ),
        WebhookDeliveryRow(
            id="wd_a",
            endpoint_id="we_a",
            tenant=TENANT_A,
            event_id="e",
            event_type="response.completed",
            object_id="o",
            body=text("webhook_deliveries"),
        ),
        VectorStoreRow(id="vs_a", tenant=TENANT_A, name="", metadata_={"m": text("vector_stores")}),
        VectorStoreFileRow(
            vector_store_id="vs_a", id="file_a", tenant=TENANT_A, attributes={"a": text("vector_store_files")}
        ),
        # A chunk counts its text and its embedding's bytes (none here).
        VectorStoreChunkRow(vector_store_id="vs_a", file_id="file_a", position=0, text=text("vector_store_chunks")),
    ]


async def seed_and_measure(url: str) -> tuple[dict[str, dict[str, int]], int]:
    """Tenant A's rows in every table and tenant B's one response, on a migrated database at `url`: each table's
    measure, and how many tenants the measurement found."""
    database = Database.connect(url)
    try:
        async with database.transaction() as session:
            for row in tenant_a_rows():  # parents first: the foreign keys hold on Postgres
                session.add(row)
                await session.flush()
            session.add(ResponseRow(id="resp_b", tenant=TENANT_B, status="completed", model="m", params={}))
        async with database.read() as session:
            tables = {table: await repository.measure_table(session, table) for table in repository.MEASURES}
        return tables, await measure_stored_bytes(database)
    finally:
        await database.dispose()


def check_measures(tables: dict[str, dict[str, int]], tenants: int) -> None:
    assert tenants == 2
    for table, measured in tables.items():
        # The payload, and little more (JSON's braces and key, a file's name): nothing of another table's.
        size = PAYLOAD[table] if table != "output_items" else 64
        assert size <= measured[TENANT_A] < size + 100, table
    assert set(tables["responses"]) == {TENANT_A, TENANT_B}
    assert all(set(measured) == {TENANT_A} for table, measured in tables.items() if table != "responses")


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'measure.db'}"
    await upgrade_to_head_async(url)
    yield url


def test_every_table_with_a_tenants_data_is_measured() -> None:
    assert set(repository.MEASURES) | {"file_chunks"} | NOT_MEASURED == set(Base.metadata.tables)


async def test_the_measure_counts_each_table_for_its_tenant(url: str) -> None:
    check_measures(*await seed_and_measure(url))


async def test_a_measurement_sets_the_counters(url: str) -> None:
    tables, _ = await seed_and_measure(url)
    database = Database.connect(url)
    try:
        async with database.transaction() as session:
            assert await repository.charge(session, TENANT_B, 10) > 10  # measured, then charged on top
            assert await repository.charge(session, "project:gone", 5) == 5  # its first charge makes its row
            await session.delete(await session.get(ResponseRow, "resp_b"))
        assert await measure_stored_bytes(database) == 1
        async with database.read() as session:
            row = await repository.stored_bytes(session, TENANT_A)
            assert row is not None and row.measured_at is not None
            assert row.bytes == sum(measured[TENANT_A] for measured in tables.values())
            # Nothing left stored: the charges were of data the measurement found gone.
            for tenant in (TENANT_B, "project:gone"):
                emptied = await repository.stored_bytes(session, tenant)
                assert emptied is not None and emptied.bytes == 0
    finally:
        await database.dispose()


async def test_a_charge_during_a_measurement_is_kept_and_two_nodes_measure_once(url: str) -> None:
    await seed_and_measure(url)
    database = Database.connect(url)
    try:
        async with database.read() as session:
            seen = await repository.counters(session)
            totals = await repository.measure(session)
        before = seen[TENANT_A][0]
        # Committed after the measure read the tables: neither the counters it saw nor the sums have it.
        async with database.transaction() as session:
            await repository.charge(session, TENANT_A, 7)
            await repository.charge(session, "project:new", 3)
        for _ in range(2):  # a second node recording what it saw at the same moment changes nothing more
            async with database.transaction() as session:
                await repository.record_measurement(session, totals, seen, utc_now())
        async with database.read() as session:
            assert (await repository.counters(session))[TENANT_A][0] == before + 7
            assert (await repository.counters(session))["project:new"][0] == 3
    finally:
        await database.dispose()


def test_the_migration_upgrades_and_downgrades(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    config = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(config, "20261205_0015")
    command.upgrade(config, "20261207_0017")
    insert = "INSERT INTO tenant_storage VALUES ('public', 12, NULL)"
    with sqlite3.connect(path) as database:
        database.execute(insert)
        with pytest.raises(sqlite3.IntegrityError):
            database.execute(insert)  # one row a tenant
    command.downgrade(config, "20261205_0015")
    with sqlite3.connect(path) as database:
        assert not database.execute("SELECT name FROM sqlite_master WHERE name = 'tenant_storage'").fetchall()
    command.upgrade(config, "head")
