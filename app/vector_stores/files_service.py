"""A vector store's files and file batches: attach (charged to the stored-bytes quota; indexed in the background by
app/retrieval/indexing.py), retrieve, list, update attributes, detach, read back; batches created, read, cancelled.
Also the wire form of a store and of its files, which both services build."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import utc_now
from app.db.models import VectorStoreFileBatchRow, VectorStoreFileRow, VectorStoreRow
from app.errors import InvalidRequest, NotFound
from app.files import repository as files
from app.files.service import file_not_found
from app.ids import new_id
from app.quotas.stored_bytes import charge_stored_bytes
from app.retrieval.chunking import AUTO_MAX_TOKENS, AUTO_OVERLAP_TOKENS, Chunking
from app.runtime import Runtime
from app.schemas.paging import PageRequest, cursor_page, page_after
from app.vector_stores import repository
from app.vector_stores.repository import Counts
from app.vector_stores.schemas import (
    Attributes,
    ChunkingStrategyParam,
    CreateFileBatchRequest,
    ExpiresAfter,
    FileContentPage,
    FileCounts,
    FileParam,
    LastError,
    StaticChunking,
    StaticChunkingObject,
    TextContent,
    VectorStoreFileBatchObject,
    VectorStoreFileDeleted,
    VectorStoreFileList,
    VectorStoreFileObject,
    VectorStoreObject,
)

FILE_STATUSES = ("in_progress", "completed", "cancelled", "failed")


def _seconds(moment: Any) -> int:
    return int(moment.timestamp())


def file_counts(counts: Counts) -> FileCounts:
    return FileCounts(**{status: counts.get(status, 0) for status in FILE_STATUSES}, total=sum(counts.values()))


def store_object(row: VectorStoreRow, counts: Counts, usage_bytes: int) -> VectorStoreObject:
    expired = row.expires_at is not None and row.expires_at <= utc_now()
    status = "expired" if expired else "in_progress" if counts.get("in_progress") else "completed"
    days = row.expires_after_days
    return VectorStoreObject(
        id=row.id,
        created_at=_seconds(row.created_at),
        name=row.name,
        usage_bytes=usage_bytes,
        file_counts=file_counts(counts),
        status=status,
        expires_after=ExpiresAfter(anchor="last_active_at", days=days) if days is not None else None,
        expires_at=_seconds(row.expires_at) if row.expires_at is not None else None,
        last_active_at=_seconds(row.last_active_at),
        metadata=row.metadata_,
    )


def mark_active(store: VectorStoreRow) -> None:
    """The store was used now: its expiry (expires_after, anchored at last_active_at) moves with it."""
    store.last_active_at = utc_now()
    days = store.expires_after_days
    store.expires_at = store.last_active_at + timedelta(days=days) if days is not None else None


def store_file_object(row: VectorStoreFileRow) -> VectorStoreFileObject:
    error = None
    if row.last_error_code is not None:
        error = LastError(code=row.last_error_code, message=row.last_error_message or "")
    return VectorStoreFileObject(
        id=row.id,
        created_at=_seconds(row.created_at),
        usage_bytes=row.usage_bytes,
        vector_store_id=row.vector_store_id,
        status=row.status,
        last_error=error,
        attributes=row.attributes,
        chunking_strategy=StaticChunkingObject(
            static=StaticChunking(
                max_chunk_size_tokens=row.max_chunk_size_tokens, chunk_overlap_tokens=row.chunk_overlap_tokens
            )
        ),
    )


def chunking_of(strategy: ChunkingStrategyParam | None, param: str) -> tuple[str, Chunking]:
    """A chunking_strategy as (its type, the sizes it chunks by), or a 400 naming what is wrong."""
    if strategy is None or strategy.type == "auto":
        return "auto", Chunking(AUTO_MAX_TOKENS, AUTO_OVERLAP_TOKENS)
    static = strategy.static
    if static is None:
        raise InvalidRequest(
            f"Missing required parameter: '{param}.static'.", param=f"{param}.static", code="missing_required_parameter"
        )
    if static.chunk_overlap_tokens > static.max_chunk_size_tokens // 2:
        raise InvalidRequest(
            f"Invalid '{param}.static.chunk_overlap_tokens': it may not exceed half of max_chunk_size_tokens.",
            param=f"{param}.static.chunk_overlap_tokens",
            code="invalid_value",
        )
    return "static", Chunking(static.max_chunk_size_tokens, static.chunk_overlap_tokens)


async def attach_files(
    session: AsyncSession,
    runtime: Runtime,
    store: VectorStoreRow,
    entries: Sequence[FileParam],
    *,
    chunking: tuple[str, Chunking],
    attributes: Attributes | None,
    batch_id: str | None,
) -> list[VectorStoreFileRow]:
    """Attach the tenant's files to `store` in the caller's unit of work, `in_progress` until indexed; each charged
    its size to the stored-bytes quota (what its chunks will hold, about). A file the tenant does not have: 404."""
    rows = []
    for index, entry in enumerate(entries):
        stored = await files.get_file(session, entry.file_id, store.tenant)
        if stored is None:
            raise file_not_found(entry.file_id)
        kind, sizes = (
            chunking
            if entry.chunking_strategy is None
            else chunking_of(entry.chunking_strategy, f"files[{index}].chunking_strategy")
        )
        row = await repository.upsert_store_file(
            session,
            {
                "vector_store_id": store.id,
                "id": stored.id,
                "tenant": store.tenant,
                "filename": stored.filename,
                "status": "in_progress",
                "last_error_code": None,
                "last_error_message": None,
                "usage_bytes": 0,
                "attributes": entry.attributes if entry.attributes is not None else attributes,
                "chunking_type": kind,
                "max_chunk_size_tokens": sizes.max_tokens,
                "chunk_overlap_tokens": sizes.overlap_tokens,
                "batch_id": batch_id,
                "created_at": utc_now(),
                "claimed_by": None,
                "lease_expires_at": None,
                "attempts": 0,
            },
        )
        rows.append(row)
        size = stored.bytes
        await charge_stored_bytes(session, runtime, store.tenant, lambda size=size: size)  # type: ignore[misc]
    return rows


async def _store(session: AsyncSession, store_id: str, tenant: str) -> VectorStoreRow:
    store = await repository.get_store(session, store_id, tenant)
    if store is None:
        raise NotFound(f"No vector store found with id '{store_id}'.", param="vector_store_id")
    return store


def _store_file_not_found(store_id: str, file_id: str) -> NotFound:
    return NotFound(f"No file '{file_id}' in vector store '{store_id}'.", param="file_id")


async def create_store_file(runtime: Runtime, store_id: str, tenant: str, body: FileParam) -> VectorStoreFileObject:
    async with runtime.database.transaction() as session:
        store = await _store(session, store_id, tenant)
        chunking = chunking_of(body.chunking_strategy, "chunking_strategy")
        entry = FileParam(file_id=body.file_id, attributes=body.attributes)
        (row,) = await attach_files(session, runtime, store, [entry], chunking=chunking, attributes=None, batch_id=None)
        mark_active(store)
    runtime.wake_indexer()
    return store_file_object(row)


async def _store_file(session: AsyncSession, store_id: str, file_id: str, tenant: str) -> VectorStoreFileRow:
    await _store(session, store_id, tenant)
    row = await repository.get_store_file(session, store_id, file_id)
    if row is None:
        raise _store_file_not_found(store_id, file_id)
    return row


async def get_store_file(runtime: Runtime, store_id: str, file_id: str, tenant: str) -> VectorStoreFileObject:
    async with runtime.database.read() as session:
        return store_file_object(await _store_file(session, store_id, file_id, tenant))


async def update_store_file(
    runtime: Runtime, store_id: str, file_id: str, tenant: str, attributes: Attributes | None
) -> VectorStoreFileObject:
    async with runtime.database.transaction() as session:
        row = await _store_file(session, store_id, file_id, tenant)
        await repository.set_attributes(session, row, attributes)
        return store_file_object(row)


async def delete_store_file(runtime: Runtime, store_id: str, file_id: str, tenant: str) -> VectorStoreFileDeleted:
    """Detach the file (its chunks go; the file itself stays in the Files API)."""
    async with runtime.database.transaction() as session:
        await _store_file(session, store_id, file_id, tenant)
        await repository.detach_file(session, store_id, file_id)
    return VectorStoreFileDeleted(id=file_id)


async def store_file_content(runtime: Runtime, store_id: str, file_id: str, tenant: str) -> FileContentPage:
    """The file's text as indexed, chunk by chunk.

    NOTE: the text is kept as chunks, which overlap (chunk_overlap_tokens): each entry is one chunk."""
    async with runtime.database.read() as session:
        await _store_file(session, store_id, file_id, tenant)
        texts = await repository.chunk_texts(session, store_id, file_id)
    return FileContentPage(data=[TextContent(text=text) for text in texts])


def _status_filter(status: str | None) -> str | None:
    if status is not None and status not in FILE_STATUSES:
        raise InvalidRequest(
            f"Invalid 'filter': '{status[:32]}'. It must be one of {', '.join(FILE_STATUSES)}.",
            param="filter",
            code="invalid_value",
        )
    return status


async def list_store_files(
    runtime: Runtime,
    store_id: str,
    tenant: str,
    page: PageRequest,
    status: str | None,
    batch_id: str | None = None,
) -> VectorStoreFileList:
    status = _status_filter(status)
    async with runtime.database.read() as session:
        await _store(session, store_id, tenant)
        if batch_id is not None and await repository.get_batch(session, store_id, batch_id) is None:
            raise NotFound(f"No file batch found with id '{batch_id}'.", param="batch_id")
        rows, has_more = await page_after(
            page,
            partial(repository.get_store_file, session, store_id),
            lambda after: repository.page_store_files(
                session, store_id, status=status, batch_id=batch_id, limit=page.limit, order=page.order, after=after
            ),
            unknown_after=lambda after: f"Invalid 'after': no file '{after}' in this vector store.",
        )
    return cursor_page(VectorStoreFileList, [store_file_object(row) for row in rows], has_more)


def batch_object(batch: VectorStoreFileBatchRow, counts: Counts) -> VectorStoreFileBatchObject:
    if batch.cancelled_at is not None:
        status = "cancelled"
    else:
        status = "in_progress" if counts.get("in_progress") else "completed"
    return VectorStoreFileBatchObject(
        id=batch.id,
        created_at=_seconds(batch.created_at),
        vector_store_id=batch.vector_store_id,
        status=status,
        file_counts=file_counts(counts),
    )


async def create_file_batch(
    runtime: Runtime, store_id: str, tenant: str, body: CreateFileBatchRequest
) -> VectorStoreFileBatchObject:
    if (body.file_ids is None) == (body.files is None):
        raise InvalidRequest(
            "Exactly one of 'file_ids' and 'files' is required.", param="file_ids", code="invalid_value"
        )
    entries = body.files or [FileParam(file_id=file_id) for file_id in body.file_ids or []]
    if not entries:
        raise InvalidRequest("The batch names no files.", param="file_ids", code="invalid_value")
    chunking = chunking_of(body.chunking_strategy, "chunking_strategy")
    async with runtime.database.transaction() as session:
        store = await _store(session, store_id, tenant)
        batch = VectorStoreFileBatchRow(
            id=new_id("vsfb"), vector_store_id=store.id, tenant=tenant, created_at=utc_now()
        )
        await repository.insert_batch(session, batch)
        # With `files`, each entry's own attributes and chunking only (the batch-wide ones are ignored, as hosted).
        attributes = body.attributes if body.files is None else None
        await attach_files(
            session, runtime, store, entries, chunking=chunking, attributes=attributes, batch_id=batch.id
        )
        counts = await repository.batch_counts(session, batch.id)
    runtime.wake_indexer()
    return batch_object(batch, counts)


async def _batch(session: AsyncSession, store_id: str, batch_id: str, tenant: str) -> VectorStoreFileBatchRow:
    await _store(session, store_id, tenant)
    batch = await repository.get_batch(session, store_id, batch_id)
    if batch is None:
        raise NotFound(f"No file batch found with id '{batch_id}'.", param="batch_id")
    return batch


async def get_file_batch(runtime: Runtime, store_id: str, batch_id: str, tenant: str) -> VectorStoreFileBatchObject:
    async with runtime.database.read() as session:
        batch = await _batch(session, store_id, batch_id, tenant)
        return batch_object(batch, await repository.batch_counts(session, batch.id))


async def cancel_file_batch(runtime: Runtime, store_id: str, batch_id: str, tenant: str) -> VectorStoreFileBatchObject:
    """Cancel the files of the batch not indexed yet (a batch already ended is returned as it is)."""
    async with runtime.database.transaction() as session:
        batch = await _batch(session, store_id, batch_id, tenant)
        counts = await repository.batch_counts(session, batch.id)
        if batch.cancelled_at is None and counts.get("in_progress"):
            await repository.cancel_batch(session, batch, utc_now())
            counts = await repository.batch_counts(session, batch.id)
        return batch_object(batch, counts)
