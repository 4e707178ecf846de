"""The Files API: upload (purpose "batch"), retrieve, list, delete, and a file's content streamed out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import FileRow
from app.db.session import Database
from app.errors import InvalidRequest, NotFound
from app.files import repository
from app.files.schemas import OUTPUT_PURPOSE, UPLOAD_PURPOSES, FileDeleted, FileList, FileObject
from app.files.storage import read_chunks, store_upload
from app.quotas.stored_bytes import charge_stored_bytes
from app.runtime import Runtime
from app.schemas.paging import PageRequest, cursor_page, page_after
from app.schemas.parsing import request_too_large

#: The longest file name kept (longer ones are cut).
MAX_FILENAME_CHARS = 512


def file_not_found(file_id: str) -> NotFound:
    return NotFound(f"No such File object: {file_id}", param="file_id")


def file_object(row: FileRow, output_retention_days: float = 0.0) -> FileObject:
    """The file on the wire; a batch's output or error file says when retention deletes it (`expires_at`, as the
    hosted API's do), an uploaded one is kept until deleted."""
    created_at = int(row.created_at.timestamp())
    expires_at = None
    if row.purpose == OUTPUT_PURPOSE and output_retention_days > 0:
        expires_at = created_at + int(output_retention_days * 86400)
    return FileObject(
        id=row.id,
        bytes=row.bytes,
        created_at=created_at,
        filename=row.filename,
        purpose=row.purpose,
        expires_at=expires_at,
    )


def check_purpose(purpose: str | None) -> str:
    if not purpose:
        raise InvalidRequest(
            "Missing required parameter: 'purpose'.", param="purpose", code="missing_required_parameter"
        )
    if purpose not in UPLOAD_PURPOSES:
        # NOTE: the hosted API takes more purposes (fine-tune, vision, evals...); only batch input and files for
        # vector stores have a use here yet.
        raise InvalidRequest(
            f"Invalid value for 'purpose': '{purpose[:64]}'. Only 'batch', 'assistants' and 'user_data' are "
            "supported for now.",
            param="purpose",
            code="invalid_value",
        )
    return purpose


async def upload_file(
    runtime: Runtime, tenant: str, *, purpose: str, filename: str, content: AsyncIterator[bytes]
) -> FileObject:
    """Store the upload's bytes a chunk a transaction (storage.store_upload: whole or not at all, and visible only
    once whole); over the size limit, a 413; past the stored-bytes quota, a 429 (either: nothing left behind)."""
    limit = runtime.settings.file_max_bytes

    async def within_limit() -> AsyncIterator[bytes]:
        size = 0
        async for data in content:
            size += len(data)
            if size > limit:
                raise request_too_large(limit)
            yield data

    async def charge(session: AsyncSession, row: FileRow) -> None:
        await charge_stored_bytes(session, runtime, tenant, lambda: row.bytes + len(row.filename))

    row = await store_upload(
        runtime.database,
        tenant=tenant,
        purpose=purpose,
        filename=filename[:MAX_FILENAME_CHARS],
        content=within_limit(),
        finish=charge,
    )
    return file_object(row)


async def get_file(runtime: Runtime, file_id: str, tenant: str) -> FileObject:
    async with runtime.database.read() as session:
        row = await repository.get_file(session, file_id, tenant)
    if row is None:
        raise file_not_found(file_id)
    return file_object(row, runtime.settings.batch_output_retention_days)


async def list_files(runtime: Runtime, tenant: str, purpose: str | None, page: PageRequest) -> FileList:
    async with runtime.database.read() as session:
        rows, has_more = await page_after(
            page,
            partial(repository.get_file, session, tenant=tenant),
            lambda after: repository.page_files(
                session, tenant, purpose, limit=page.limit, order=page.order, after=after
            ),
            unknown_after=lambda after: f"Invalid 'after': no file '{after}'.",
        )
    kept_days = runtime.settings.batch_output_retention_days
    return cursor_page(FileList, [file_object(row, kept_days) for row in rows], has_more)


async def delete_file(database: Database, file_id: str, tenant: str) -> FileDeleted:
    async with database.transaction() as session:
        if not await repository.delete_file(session, file_id, tenant):
            raise file_not_found(file_id)
    return FileDeleted(id=file_id)


async def file_content(database: Database, file_id: str, tenant: str) -> AsyncIterator[bytes]:
    """The file's bytes, a chunk at a time; a 404 (before the first byte) when the tenant has no such file."""
    async with database.read() as session:
        if await repository.get_file(session, file_id, tenant) is None:
            raise file_not_found(file_id)
    return read_chunks(database, file_id)
