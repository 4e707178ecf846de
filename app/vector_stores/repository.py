"""Queries of the Vector Stores API: stores, their files and file batches (insert, find, page, count, delete)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import VectorStoreChunkRow, VectorStoreFileBatchRow, VectorStoreFileRow, VectorStoreRow
from app.db.paging import page_by_creation

Counts = dict[str, int]


async def get_store(session: AsyncSession, store_id: str, tenant: str) -> VectorStoreRow | None:
    query = select(VectorStoreRow).where(VectorStoreRow.id == store_id, VectorStoreRow.tenant == tenant)
    return (await session.execute(query)).scalar_one_or_none()


async def page_stores(
    session: AsyncSession, tenant: str, *, limit: int, order: Literal["asc", "desc"], after: VectorStoreRow | None
) -> tuple[list[VectorStoreRow], bool]:
    query = select(VectorStoreRow).where(VectorStoreRow.tenant == tenant)
    return await page_by_creation(session, VectorStoreRow, query, limit=limit, order=order, after=after)


async def file_counts(session: AsyncSession, store_ids: Sequence[str]) -> dict[str, tuple[Counts, int]]:
    """Per store: its files by status, and the bytes they use."""
    rows = await session.execute(
        select(
            VectorStoreFileRow.vector_store_id,
            VectorStoreFileRow.status,
            func.count(),
            func.coalesce(func.sum(VectorStoreFileRow.usage_bytes), 0),
        )
        .where(VectorStoreFileRow.vector_store_id.in_(store_ids))
        .group_by(VectorStoreFileRow.vector_store_id, VectorStoreFileRow.status)
    )
    found: dict[str, tuple[Counts, int]] = {}
    for store_id, status, count, usage in rows.all():
        counts, total = found.get(store_id, ({}, 0))
        counts[status] = int(count)
        found[store_id] = (counts, total + int(usage))
    return found


async def batch_counts(session: AsyncSession, batch_id: str) -> Counts:
    rows = await session.execute(
        select(VectorStoreFileRow.status, func.count())
        .where(VectorStoreFileRow.batch_id == batch_id)
        .group_by(VectorStoreFileRow.status)
    )
    return {status: int(count) for status, count in rows.all()}


async def delete_store(session: AsyncSession, store_id: str) -> None:
    # Explicitly, not only by the cascade: a database without foreign keys enforced keeps no orphans, and SQLite's
    # full-text index is kept by the chunks' delete trigger.
    await session.execute(delete(VectorStoreChunkRow).where(VectorStoreChunkRow.vector_store_id == store_id))
    await session.execute(delete(VectorStoreFileRow).where(VectorStoreFileRow.vector_store_id == store_id))
    await session.execute(delete(VectorStoreFileBatchRow).where(VectorStoreFileBatchRow.vector_store_id == store_id))
    await session.execute(delete(VectorStoreRow).where(VectorStoreRow.id == store_id))


async def get_store_file(session: AsyncSession, store_id: str, file_id: str) -> VectorStoreFileRow | None:
    return await session.get(VectorStoreFileRow, (store_id, file_id), populate_existing=True)


async def upsert_store_file(session: AsyncSession, values: dict[str, Any]) -> VectorStoreFileRow:
    """Attach a file (again: a file already attached is indexed anew with the new attributes and chunking)."""
    row = await get_store_file(session, values["vector_store_id"], values["id"])
    if row is None:
        row = VectorStoreFileRow(**values)
        session.add(row)
    else:
        for key, value in values.items():
            setattr(row, key, value)
    await session.flush()
    return row


async def page_store_files(
    session: AsyncSession,
    store_id: str,
    *,
    status: str | None,
    batch_id: str | None,
    limit: int,
    order: Literal["asc", "desc"],
    after: VectorStoreFileRow | None,
) -> tuple[list[VectorStoreFileRow], bool]:
    query = select(VectorStoreFileRow).where(VectorStoreFileRow.vector_store_id == store_id)
    if status is not None:
        query = query.where(VectorStoreFileRow.status == status)
    if batch_id is not None:
        query = query.where(VectorStoreFileRow.batch_id == batch_id)
    return await page_by_creation(session, VectorStoreFileRow, query, limit=limit, order=order, after=after)


async def set_attributes(session: AsyncSession, row: VectorStoreFileRow, attributes: dict[str, Any] | None) -> None:
    row.attributes = attributes
    await session.flush()


async def detach_file(session: AsyncSession, store_id: str, file_id: str) -> None:
    await session.execute(
        delete(VectorStoreChunkRow).where(
            VectorStoreChunkRow.vector_store_id == store_id, VectorStoreChunkRow.file_id == file_id
        )
    )
    await session.execute(
        delete(VectorStoreFileRow).where(
            VectorStoreFileRow.vector_store_id == store_id, VectorStoreFileRow.id == file_id
        )
    )


async def chunk_texts(session: AsyncSession, store_id: str, file_id: str) -> list[str]:
    rows = await session.execute(
        select(VectorStoreChunkRow.text)
        .where(VectorStoreChunkRow.vector_store_id == store_id, VectorStoreChunkRow.file_id == file_id)
        .order_by(VectorStoreChunkRow.position)
    )
    return list(rows.scalars())


async def insert_batch(session: AsyncSession, row: VectorStoreFileBatchRow) -> None:
    session.add(row)
    await session.flush()


async def get_batch(session: AsyncSession, store_id: str, batch_id: str) -> VectorStoreFileBatchRow | None:
    query = select(VectorStoreFileBatchRow).where(
        VectorStoreFileBatchRow.id == batch_id, VectorStoreFileBatchRow.vector_store_id == store_id
    )
    return (await session.execute(query)).scalar_one_or_none()


async def cancel_batch(session: AsyncSession, batch: VectorStoreFileBatchRow, now: datetime) -> None:
    """The batch cancelled, and its files still in progress with it (an indexing that finishes later finds its
    claim gone and writes nothing)."""
    batch.cancelled_at = now
    await session.execute(
        update(VectorStoreFileRow)
        .where(VectorStoreFileRow.batch_id == batch.id, VectorStoreFileRow.status == "in_progress")
        .values(status="cancelled", claimed_by=None, lease_expires_at=None)
    )
    await session.flush()


async def purge_expired_stores(session: AsyncSession, *, now: datetime, limit: int) -> int:
    """Delete up to `limit` stores past their expiry, with their files, batches and chunks; how many."""
    expired = (
        select(VectorStoreRow.id)
        .where(VectorStoreRow.expires_at.is_not(None), VectorStoreRow.expires_at <= now)
        .order_by(VectorStoreRow.expires_at)
        .limit(limit)
    )
    ids = list((await session.execute(expired)).scalars())
    for store_id in ids:
        await delete_store(session, store_id)
    return len(ids)
