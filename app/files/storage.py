"""A file's bytes in and out, a chunk at a time: an upload's a chunk a transaction under a row no read finds until
it is whole (`store_upload`), a batch's output into its finalizing unit of work (`FileWriter`); read back one chunk
a query (never the whole file in memory)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import utc_now
from app.db.models import FileRow
from app.db.session import Database
from app.files import repository
from app.ids import new_id

#: The most bytes a `file_chunks` row holds.
CHUNK_BYTES = 1024 * 1024


class FileWriter:
    """A new file written in `session`: its row first, then its bytes as they come, in CHUNK_BYTES rows."""

    def __init__(self, session: AsyncSession, *, tenant: str, purpose: str, filename: str) -> None:
        self.session = session
        self.row = FileRow(
            id=new_id("file"), tenant=tenant, purpose=purpose, filename=filename, bytes=0, created_at=utc_now()
        )
        self._buffer = bytearray()
        self._chunks = 0
        self._started = False

    async def write(self, data: bytes) -> None:
        if not self._started:
            await repository.insert_file(self.session, self.row)
            self._started = True
        self._buffer += data
        self.row.bytes += len(data)
        while len(self._buffer) >= CHUNK_BYTES:
            await self._flush_chunk(bytes(self._buffer[:CHUNK_BYTES]))
            del self._buffer[:CHUNK_BYTES]

    async def close(self) -> FileRow:
        """The file, whole (its size set); its last chunk written."""
        await self.write(b"")
        if self._buffer:
            await self._flush_chunk(bytes(self._buffer))
            self._buffer.clear()
        await self.session.flush()
        return self.row

    async def _flush_chunk(self, data: bytes) -> None:
        await repository.insert_chunk(self.session, self.row.id, self._chunks, data)
        self._chunks += 1


async def store_upload(
    database: Database,
    *,
    tenant: str,
    purpose: str,
    filename: str,
    content: AsyncIterator[bytes],
    finish: Callable[[AsyncSession, FileRow], Awaitable[None]],
) -> FileRow:
    """The upload's bytes written a chunk a transaction, so that SQLite's one writer is held for one chunk's insert
    at a time, never for the whole file (other tenants' writes go between them), under a row marked `uploading`
    that no read finds. The last transaction sets its size, makes it visible and runs `finish` (the quota's charge)
    with it. A failed upload (`content` raising: too large, a dropped client; `finish` refusing; a database error)
    deletes what it wrote before the error goes on; a process that dies mid-upload leaves a row no read finds, which
    retention drops (app/ops/retention.py)."""
    row = FileRow(
        id=new_id("file"),
        tenant=tenant,
        purpose=purpose,
        filename=filename,
        bytes=0,
        status=repository.UPLOADING,
        created_at=utc_now(),
    )
    async with database.transaction() as session:
        await repository.insert_file(session, row)
    try:
        size = await _write_chunks(database, row.id, content)
        async with database.transaction() as session:
            if not await repository.complete_upload(session, row.id, size):
                raise RuntimeError(f"the upload {row.id} was removed while it was written")
            row.bytes, row.status = size, repository.PROCESSED
            await finish(session, row)
    except BaseException:
        # Shielded: a client that left cancels the request, and its half-written file must go all the same.
        await asyncio.shield(_discard(database, row.id))
        raise
    return row


async def _write_chunks(database: Database, file_id: str, content: AsyncIterator[bytes]) -> int:
    """`content` as CHUNK_BYTES rows, each in its own transaction; how many bytes."""
    buffer = bytearray()
    size = position = 0
    async for data in content:
        buffer += data
        size += len(data)
        while len(buffer) >= CHUNK_BYTES:
            async with database.transaction() as session:
                await repository.insert_chunk(session, file_id, position, bytes(buffer[:CHUNK_BYTES]))
            del buffer[:CHUNK_BYTES]
            position += 1
    if buffer:
        async with database.transaction() as session:
            await repository.insert_chunk(session, file_id, position, bytes(buffer))
    return size


async def _discard(database: Database, file_id: str) -> None:
    async with database.transaction() as session:
        await repository.discard_upload(session, file_id)


async def read_chunks(database: Database, file_id: str) -> AsyncIterator[bytes]:
    """The file's bytes, chunk after chunk, each read in its own short read (a slow reader holds no session)."""
    position = 0
    while True:
        async with database.read() as session:
            data = await repository.chunk(session, file_id, position)
        if data is None:
            return
        yield data
        position += 1


async def read_lines(database: Database, file_id: str, max_line_bytes: int) -> AsyncIterator[bytes | None]:
    """The file's lines (without their end), a chunk read at a time; a line longer than `max_line_bytes` is
    None (its bytes are skipped, never held whole)."""
    pending = bytearray()
    too_long = False
    async for data in read_chunks(database, file_id):
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                if not too_long:
                    pending += data[start:]
                    if len(pending) > max_line_bytes:
                        too_long = True
                        pending.clear()
                break
            if too_long:
                yield None
            else:
                pending += data[start:end]
                yield None if len(pending) > max_line_bytes else bytes(pending)
            pending.clear()
            too_long = False
            start = end + 1
    if too_long:
        yield None
    elif pending:
        yield bytes(pending)
