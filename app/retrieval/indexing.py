"""Indexing vector store files, durably: a file attached to a store waits `in_progress` in the database until a
process (a worker in distributed mode, the server in embedded mode) claims it, reads its text, chunks and embeds
it, and stores its chunks and `completed` in one unit of work, or `failed` with the reason.

The claim is a lease (RESPONSES_VECTOR_INDEX_LEASE_S), renewed while the work goes on: a process killed
mid-indexing leaves a claim that expires, and the next round anywhere starts the file again. After
RESPONSES_VECTOR_INDEX_MAX_ATTEMPTS starts that never finished, the file is `failed` (server_error): a file never
stays `in_progress` for ever."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.config import Settings
from app.db.models import VectorStoreFileRow
from app.db.session import Database
from app.files import repository as files
from app.files.storage import read_chunks
from app.generation.embeddings.base import Embedder, EmbeddingFailed, EmbeddingUnavailable
from app.ids import new_id
from app.retrieval import repository
from app.retrieval.chunking import Chunking, chunk_text
from app.retrieval.extraction import ExtractionError, extract_text
from app.retrieval.vectors import pack

logger = logging.getLogger(__name__)

#: Chunks embedded in one call (the claim is renewed between calls).
EMBED_BATCH = 16
#: Files given up in one round.
GIVE_UP_BATCH = 100


class ClaimLost(Exception):
    """The file is no longer ours to index (its claim expired and was taken, or it was cancelled or detached)."""


class Indexer:
    """Indexes the files waiting in the database, one at a time, for this process (`owner`)."""

    def __init__(
        self,
        database: Database,
        settings: Settings,
        embedder: Embedder | None,
    ) -> None:
        self.database = database
        self.settings = settings
        self.embedder = embedder
        self.owner = new_id("indexer")
        self.lease_s = settings.vector_index_lease_s
        self.max_attempts = settings.vector_index_max_attempts
        #: Set to start a round at once (embedded mode: a file was just attached).
        self.wake = asyncio.Event()

    async def run_forever(self) -> None:
        """Rounds for the life of the process: every RESPONSES_VECTOR_INDEX_POLL_S, or at once when woken."""
        while True:
            while await self.run_round():
                pass
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.vector_index_poll_s):
                    await self.wake.wait()
            self.wake.clear()

    async def run_round(self) -> bool:
        """Give up the files out of attempts, then index one file if one waits; whether one did."""
        await self.give_up_exhausted()
        async with self.database.transaction() as session:
            row = await repository.claim_next(session, self.owner, lease_s=self.lease_s, max_attempts=self.max_attempts)
            if row is not None:
                session.expunge(row)
        if row is None:
            return False
        await self.index(row)
        return True

    async def give_up_exhausted(self) -> int:
        async with self.database.transaction() as session:
            lost = await repository.exhausted(session, max_attempts=self.max_attempts, limit=GIVE_UP_BATCH)
            for store_id, file_id in lost:
                message = (
                    f"Indexing did not finish in {self.max_attempts} attempts (the process indexing it was lost, or "
                    "the embedding model was unavailable)."
                )
                await repository.fail_indexing(session, store_id, file_id, None, "server_error", message)
        if lost:
            logger.warning("gave up indexing %d vector store files out of attempts", len(lost))
        return len(lost)

    async def index(self, row: VectorStoreFileRow) -> None:
        """Index the claimed file to its end: completed, failed, or handed back (its claim lost: nothing)."""
        key = (row.vector_store_id, row.id)
        renewal = asyncio.create_task(self._renew(*key))
        try:
            chunks = await self._chunks(row, renewal)
        except ExtractionError as error:
            await self._fail(row, error.code, error.message)
        except EmbeddingFailed as error:
            await self._fail(row, "server_error", f"The embedding model failed: {error}")
        except EmbeddingUnavailable as error:
            logger.warning("indexing %s: %s; trying again later", row.id, error)
            async with self.database.transaction() as session:
                await repository.release_claim(session, *key, self.owner, self.lease_s)
        except ClaimLost:
            logger.info("indexing %s in %s stopped: the file is no longer ours", row.id, row.vector_store_id)
        else:
            usage = sum(len(body.encode()) + len(data or b"") for body, data in chunks)
            async with self.database.transaction() as session:
                done = await repository.finish_indexing(session, *key, self.owner, chunks, usage)
            if done:
                logger.info("indexed %s in %s: %d chunks", row.id, row.vector_store_id, len(chunks))
        finally:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError, ClaimLost):
                await renewal

    async def _fail(self, row: VectorStoreFileRow, code: str, message: str) -> None:
        async with self.database.transaction() as session:
            await repository.fail_indexing(session, row.vector_store_id, row.id, self.owner, code, message)

    async def _renew(self, store_id: str, file_id: str) -> None:
        """Renew the claim a few times a lease; raise ClaimLost (ending the indexing) when it is not ours."""
        while True:
            await asyncio.sleep(self.lease_s / 3)
            async with self.database.transaction() as session:
                held = await repository.renew_claim(session, store_id, file_id, self.owner, self.lease_s)
            if not held:
                raise ClaimLost()

    async def _read(self, row: VectorStoreFileRow) -> bytes:
        async with self.database.read() as session:
            stored = await files.get_file(session, row.id, row.tenant)
        if stored is None:
            raise ExtractionError("invalid_file", "The file was deleted before it could be indexed.")
        data = bytearray()
        async for part in read_chunks(self.database, row.id):
            data += part
        return bytes(data)

    async def _chunks(self, row: VectorStoreFileRow, renewal: asyncio.Task[None]) -> list[tuple[str, bytes | None]]:
        """The file's chunks with their embeddings (None without an embedding model)."""
        data = await self._read(row)
        text = await asyncio.to_thread(extract_text, row.filename, data)
        chunking = Chunking(row.max_chunk_size_tokens, row.chunk_overlap_tokens)
        bodies = await asyncio.to_thread(chunk_text, text, chunking)
        async with self.database.read() as session:
            model = await repository.embedding_model_of(session, row.vector_store_id)
        vectors: list[bytes | None] = [None] * len(bodies)
        if model is not None:
            if self.embedder is None:
                raise EmbeddingUnavailable(f"this process cannot reach the embedding model '{model}'")
            for start in range(0, len(bodies), EMBED_BATCH):
                self._check(renewal)
                batch = await self.embedder.embed(model, bodies[start : start + EMBED_BATCH])
                vectors[start : start + len(batch.vectors)] = [pack(vector) for vector in batch.vectors]
        self._check(renewal)
        return list(zip(bodies, vectors, strict=True))

    @staticmethod
    def _check(renewal: asyncio.Task[None]) -> None:
        if renewal.done() and not renewal.cancelled() and isinstance(renewal.exception(), ClaimLost):
            raise ClaimLost()
