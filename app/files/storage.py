"""A file's bytes in and out, a chunk at a time: written into the caller's unit of work (an upload's, or a batch's
finalizing one, so that a file is whole or absent), read back one chunk a query (never the whole file in memory)."""

from __future__ import annotations

from collections.abc import AsyncIterator

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
