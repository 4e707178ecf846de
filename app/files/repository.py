"""Queries on files and their chunks: insert, read, page, delete."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import FileChunkRow, FileRow
from app.db.paging import page_by_creation


async def insert_file(session: AsyncSession, row: FileRow) -> None:
    session.add(row)
    await session.flush()


async def insert_chunk(session: AsyncSession, file_id: str, position: int, data: bytes) -> None:
    session.add(FileChunkRow(file_id=file_id, position=position, data=data))
    await session.flush()


#: A whole file (the only kind a read finds), and one whose upload is still writing its chunks.
PROCESSED = "processed"
UPLOADING = "uploading"


async def complete_upload(session: AsyncSession, file_id: str, size: int) -> bool:
    """The upload's last step: its size set and the file made visible. False if it is not being uploaded."""
    query = (
        update(FileRow)
        .where(FileRow.id == file_id, FileRow.status == UPLOADING)
        .values(bytes=size, status=PROCESSED)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(await session.execute(query), "rowcount", 0)) == 1


async def discard_upload(session: AsyncSession, file_id: str) -> None:
    """An upload that failed: its chunks and its row, if it never completed."""
    row = await session.get(FileRow, file_id)
    if row is None or row.status != UPLOADING:
        return
    await session.execute(delete(FileChunkRow).where(FileChunkRow.file_id == file_id))
    await session.execute(delete(FileRow).where(FileRow.id == file_id))


async def get_file(session: AsyncSession, file_id: str, tenant: str) -> FileRow | None:
    query = select(FileRow).where(FileRow.id == file_id, FileRow.tenant == tenant, FileRow.status == PROCESSED)
    return (await session.execute(query)).scalar_one_or_none()


async def chunk(session: AsyncSession, file_id: str, position: int) -> bytes | None:
    query = select(FileChunkRow.data).where(FileChunkRow.file_id == file_id, FileChunkRow.position == position)
    return (await session.execute(query)).scalar_one_or_none()


async def delete_file(session: AsyncSession, file_id: str, tenant: str) -> bool:
    if await get_file(session, file_id, tenant) is None:
        return False
    # Explicitly, not only by the cascade: a database without foreign keys enforced keeps no orphan chunks.
    await session.execute(delete(FileChunkRow).where(FileChunkRow.file_id == file_id))
    await session.execute(delete(FileRow).where(FileRow.id == file_id))
    return True


async def page_files(
    session: AsyncSession,
    tenant: str,
    purpose: str | None,
    *,
    limit: int,
    order: Literal["asc", "desc"],
    after: FileRow | None,
) -> tuple[list[FileRow], bool]:
    """One page of the tenant's files (of `purpose`), in `order` of creation after the `after` row; ties on
    created_at broken by id, so that a cursor never skips nor repeats a file."""
    query = select(FileRow).where(FileRow.tenant == tenant, FileRow.status == PROCESSED)
    if purpose is not None:
        query = query.where(FileRow.purpose == purpose)
    return await page_by_creation(session, FileRow, query, limit=limit, order=order, after=after)


async def purge_files(
    session: AsyncSession, *, created_before: datetime, limit: int, purpose: str | None = None, status: str = PROCESSED
) -> int:
    """Delete up to `limit` files of `purpose` (any, when None) in `status` created before `created_before`, with
    their chunks; how many."""
    old = select(FileRow.id).where(FileRow.status == status, FileRow.created_at < created_before)
    if purpose is not None:
        old = old.where(FileRow.purpose == purpose)
    old = old.order_by(FileRow.created_at).limit(limit)
    ids = list((await session.execute(old)).scalars())
    if ids:
        # Chunks explicitly, as delete_file does: no orphan chunks without enforced foreign keys.
        await session.execute(delete(FileChunkRow).where(FileChunkRow.file_id.in_(ids)))
        await session.execute(delete(FileRow).where(FileRow.id.in_(ids)))
    return len(ids)
