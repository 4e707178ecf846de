"""Indexing is durable: a file claimed by a process that died is taken again once its lease expires and ends
`completed`; a file whose every attempt was lost ends `failed` (server_error), never `in_progress` for ever; a file
cancelled or detached mid-indexing gets nothing written; an embedding model that cannot be reached hands the file
back for a later attempt."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from app.config import Settings
from app.db.migrations import upgrade_to_head_async
from app.db.models import VectorStoreChunkRow, VectorStoreFileRow, VectorStoreRow
from app.db.session import Database
from app.files.storage import FileWriter
from app.generation.embeddings.models import EmbeddingModels, EmbeddingModelSpec
from app.retrieval import repository
from app.retrieval.indexing import Indexer
from app.testing.fake_embeddings import FakeEmbedder

TEXT = "Durable indexing survives a lost worker. " * 40


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'index.db'}"
    await upgrade_to_head_async(url)
    database = Database.connect(url)
    yield database
    await database.dispose()


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **{"vector_index_lease_s": 0.3, "vector_index_max_attempts": 2, **values})


async def attached_file(database: Database, model: str | None = None) -> tuple[str, str]:
    """A store (embedded by `model`) with one text file attached, waiting to be indexed."""
    async with database.transaction() as session:
        writer = FileWriter(session, tenant="t", purpose="assistants", filename="notes.txt")
        await writer.write(TEXT.encode())
        stored = await writer.close()
        session.add(VectorStoreRow(id="vs_1", tenant="t", name="s", embedding_model=model))
        await session.flush()
        session.add(VectorStoreFileRow(vector_store_id="vs_1", id=stored.id, tenant="t", filename="notes.txt"))
    return "vs_1", stored.id


async def state(database: Database, key: tuple[str, str]) -> tuple[VectorStoreFileRow, int]:
    async with database.read() as session:
        row = await session.get(VectorStoreFileRow, key)
        count = (await session.execute(select(func.count()).select_from(VectorStoreChunkRow))).scalar_one()
    assert row is not None
    return row, int(count)


async def claim_and_die(database: Database, indexer: Indexer) -> None:
    """What a process killed mid-indexing leaves: its claim, and nothing else."""
    async with database.transaction() as session:
        assert await repository.claim_next(session, "dead", lease_s=indexer.lease_s, max_attempts=indexer.max_attempts)


async def test_a_file_left_by_a_dead_process_is_indexed_by_another(database: Database) -> None:
    key = await attached_file(database)
    survivor = Indexer(database, settings(), None)
    await claim_and_die(database, survivor)
    assert await survivor.run_round() is False  # still held by the dead one
    await asyncio.sleep(0.35)
    assert await survivor.run_round() is True
    row, chunks = await state(database, key)
    assert row.status == "completed" and row.attempts == 2 and row.claimed_by is None
    assert chunks == 1 and row.usage_bytes == len(TEXT.strip().encode())


async def test_a_file_whose_every_attempt_was_lost_fails(database: Database) -> None:
    key = await attached_file(database)
    indexer = Indexer(database, settings(), None)
    for _ in range(2):
        await claim_and_die(database, indexer)
        await asyncio.sleep(0.35)
    assert await indexer.run_round() is False
    row, chunks = await state(database, key)
    assert row.status == "failed" and row.last_error_code == "server_error" and chunks == 0
    assert "2 attempts" in (row.last_error_message or "")


async def test_a_file_cancelled_mid_indexing_gets_nothing_written(database: Database) -> None:
    key = await attached_file(database)
    indexer = Indexer(database, settings(), None)
    async with database.transaction() as session:
        row = await repository.claim_next(session, indexer.owner, lease_s=5, max_attempts=2)
        assert row is not None
    async with database.transaction() as session:
        await session.execute(update(VectorStoreFileRow).values(status="cancelled"))
    async with database.transaction() as session:
        assert not await repository.finish_indexing(session, *key, indexer.owner, [("text", None)], 4)
    row, chunks = await state(database, key)
    assert row.status == "cancelled" and chunks == 0


async def test_an_unreachable_embedding_model_hands_the_file_back(database: Database) -> None:
    key = await attached_file(database, model="embed")
    embedder = FakeEmbedder(EmbeddingModels([EmbeddingModelSpec(id="embed", path=Path("/unused"))]))
    embedder.unavailable = True
    indexer = Indexer(database, settings(vector_index_max_attempts=3), embedder)
    assert await indexer.run_round() is True
    row, chunks = await state(database, key)
    assert row.status == "in_progress" and row.claimed_by is None and chunks == 0
    embedder.unavailable = False
    await asyncio.sleep(0.35)  # handed back until one lease from now
    assert await indexer.run_round() is True
    row, chunks = await state(database, key)
    assert row.status == "completed" and chunks == 1
    async with database.read() as session:
        embedding = (await session.execute(select(VectorStoreChunkRow.embedding))).scalar_one()
    assert embedding is not None and len(embedding) == 64 * 4
