"""Queries of retrieval: the chunks' full-text and vector candidates, chunks by id, the files a search may read,
and the indexing claims on vector store files (claim, renew, finish, fail, give up)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, or_, select, text, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.clock import database_in, database_now
from app.db.models import VectorStoreChunkRow, VectorStoreFileRow, VectorStoreRow

SQLITE_LEXICAL = """
SELECT c.id, -bm25(vector_store_chunks_fts) AS score
FROM vector_store_chunks_fts JOIN vector_store_chunks AS c ON c.id = vector_store_chunks_fts.rowid
WHERE vector_store_chunks_fts MATCH :match AND c.vector_store_id IN :stores {files}
ORDER BY score DESC LIMIT :limit
"""
POSTGRES_LEXICAL = """
SELECT c.id, ts_rank_cd(c.text_search, q.query) AS score
FROM vector_store_chunks AS c, to_tsquery('english', :match) AS q(query)
WHERE c.text_search @@ q.query AND c.vector_store_id IN :stores {files}
ORDER BY score DESC LIMIT :limit
"""


@dataclass(frozen=True, slots=True)
class SearchableFile:
    vector_store_id: str
    file_id: str
    filename: str
    attributes: dict[str, Any] | None


async def searchable_files(session: AsyncSession, store_ids: Sequence[str]) -> list[SearchableFile]:
    """The files attached to these stores (their chunks are what a search reads)."""
    rows = await session.execute(
        select(
            VectorStoreFileRow.vector_store_id,
            VectorStoreFileRow.id,
            VectorStoreFileRow.filename,
            VectorStoreFileRow.attributes,
        ).where(VectorStoreFileRow.vector_store_id.in_(store_ids))
    )
    return [SearchableFile(*row) for row in rows.all()]


async def files_of(session: AsyncSession, keys: Collection[tuple[str, str]]) -> list[SearchableFile]:
    """These attached files ((store id, file id) each), as a search result names them."""
    if not keys:
        return []
    rows = await session.execute(
        select(
            VectorStoreFileRow.vector_store_id,
            VectorStoreFileRow.id,
            VectorStoreFileRow.filename,
            VectorStoreFileRow.attributes,
        ).where(tuple_(VectorStoreFileRow.vector_store_id, VectorStoreFileRow.id).in_(list(keys)))
    )
    return [SearchableFile(*row) for row in rows.all()]


def _dialect(session: AsyncSession) -> str:
    return session.get_bind().dialect.name


async def lexical_hits(
    session: AsyncSession, store_ids: Sequence[str], file_ids: Sequence[str] | None, words: Sequence[str], limit: int
) -> list[tuple[int, float]]:
    """The chunks that hold any of `words`, best BM25 first: (chunk id, raw score)."""
    words = [word for word in words if any(character.isalnum() for character in word)]
    if not words:
        return []
    postgres = _dialect(session) == "postgresql"
    match = " | ".join(words) if postgres else " OR ".join(f'"{word}"' for word in words)
    files = "AND c.file_id IN :files" if file_ids is not None else ""
    statement = text((POSTGRES_LEXICAL if postgres else SQLITE_LEXICAL).format(files=files))
    parameters: dict[str, Any] = {"match": match, "stores": list(store_ids), "limit": limit}
    statement = statement.bindparams(bindparam("stores", expanding=True))
    if file_ids is not None:
        statement = statement.bindparams(bindparam("files", expanding=True))
        parameters["files"] = list(file_ids)
    rows = await session.execute(statement, parameters)
    return [(int(chunk_id), float(score)) for chunk_id, score in rows.all()]


async def vector_revision(session: AsyncSession, store_id: str) -> tuple[int, int]:
    """A store's chunks: how many, and the highest id (what a kept copy of its vectors is checked against). From
    the store's index alone: no chunk's row (nor its embedding) is read."""
    query = select(func.count(), func.coalesce(func.max(VectorStoreChunkRow.id), 0)).where(
        VectorStoreChunkRow.vector_store_id == store_id
    )
    count, newest = (await session.execute(query)).one()
    return int(count), int(newest)


async def store_embeddings(session: AsyncSession, store_id: str) -> list[tuple[int, str, bytes]]:
    """Every embedded chunk of the store: (chunk id, file id, packed vector)."""
    query = select(VectorStoreChunkRow.id, VectorStoreChunkRow.file_id, VectorStoreChunkRow.embedding).where(
        VectorStoreChunkRow.vector_store_id == store_id, VectorStoreChunkRow.embedding.is_not(None)
    )
    return [
        (int(chunk_id), file_id, bytes(data or b"")) for chunk_id, file_id, data in (await session.execute(query)).all()
    ]


@dataclass(frozen=True, slots=True)
class FoundChunk:
    id: int
    vector_store_id: str
    file_id: str
    position: int
    text: str


async def chunks_by_id(session: AsyncSession, chunk_ids: Sequence[int]) -> dict[int, FoundChunk]:
    """The chunks' text and place (not their embeddings)."""
    if not chunk_ids:
        return {}
    rows = await session.execute(
        select(
            VectorStoreChunkRow.id,
            VectorStoreChunkRow.vector_store_id,
            VectorStoreChunkRow.file_id,
            VectorStoreChunkRow.position,
            VectorStoreChunkRow.text,
        ).where(VectorStoreChunkRow.id.in_(chunk_ids))
    )
    return {int(row[0]): FoundChunk(int(row[0]), row[1], row[2], int(row[3]), row[4]) for row in rows.all()}


async def chunk_texts_by_id(session: AsyncSession, chunk_ids: Sequence[int]) -> dict[int, str]:
    if not chunk_ids:
        return {}
    rows = await session.execute(
        select(VectorStoreChunkRow.id, VectorStoreChunkRow.text).where(VectorStoreChunkRow.id.in_(chunk_ids))
    )
    return {int(chunk_id): body for chunk_id, body in rows.all()}


def _claimable(session: AsyncSession) -> list[Any]:
    """Waiting to be indexed: never claimed, or its claim expired by the database's clock (app/db/clock.py), which
    writes every claim's expiry too: no host's clock decides who indexes a file."""
    return [
        VectorStoreFileRow.status == "in_progress",
        or_(VectorStoreFileRow.lease_expires_at.is_(None), VectorStoreFileRow.lease_expires_at < database_now(session)),
    ]


async def claim_next(
    session: AsyncSession, owner: str, *, lease_s: float, max_attempts: int
) -> VectorStoreFileRow | None:
    """Claim the oldest file waiting to be indexed (never claimed, or its claim expired) that has attempts left,
    for `lease_s`; None when there is none, or another process claimed it first (a conditional UPDATE decides)."""
    candidate = (
        await session.execute(
            select(VectorStoreFileRow.vector_store_id, VectorStoreFileRow.id)
            .where(*_claimable(session), VectorStoreFileRow.attempts < max_attempts)
            .order_by(VectorStoreFileRow.created_at)
            .limit(1)
        )
    ).first()
    if candidate is None:
        return None
    store_id, file_id = candidate
    claimed = await session.execute(
        update(VectorStoreFileRow)
        .where(VectorStoreFileRow.vector_store_id == store_id, VectorStoreFileRow.id == file_id, *_claimable(session))
        .values(
            claimed_by=owner, lease_expires_at=database_in(session, lease_s), attempts=VectorStoreFileRow.attempts + 1
        )
    )
    if claimed.rowcount != 1:  # type: ignore[attr-defined]
        return None
    return await session.get(VectorStoreFileRow, (store_id, file_id), populate_existing=True)


def _held(store_id: str, file_id: str, owner: str) -> list[Any]:
    return [
        VectorStoreFileRow.vector_store_id == store_id,
        VectorStoreFileRow.id == file_id,
        VectorStoreFileRow.claimed_by == owner,
        VectorStoreFileRow.status == "in_progress",
    ]


async def renew_claim(session: AsyncSession, store_id: str, file_id: str, owner: str, lease_s: float) -> bool:
    """Extend the claim to `lease_s` from now; False when it is no longer ours (it expired and was taken, or the
    file was cancelled, detached or its store deleted)."""
    result = await session.execute(
        update(VectorStoreFileRow)
        .where(*_held(store_id, file_id, owner))
        .values(lease_expires_at=database_in(session, lease_s))
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


async def release_claim(session: AsyncSession, store_id: str, file_id: str, owner: str, retry_in_s: float) -> bool:
    """Hand the file back (to be claimed again `retry_in_s` from now): its attempt counts."""
    result = await session.execute(
        update(VectorStoreFileRow)
        .where(*_held(store_id, file_id, owner))
        .values(claimed_by=None, lease_expires_at=database_in(session, retry_in_s))
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


async def finish_indexing(
    session: AsyncSession,
    store_id: str,
    file_id: str,
    owner: str,
    chunks: Sequence[tuple[str, bytes | None]],
    usage_bytes: int,
) -> bool:
    """Store the file's chunks (text, packed embedding) in place of any it had, and mark it completed; False (and
    nothing written) when the claim is no longer ours."""
    completed = await session.execute(
        update(VectorStoreFileRow)
        .where(*_held(store_id, file_id, owner))
        .values(status="completed", usage_bytes=usage_bytes, claimed_by=None, lease_expires_at=None)
    )
    if completed.rowcount != 1:  # type: ignore[attr-defined]
        return False
    await delete_chunks(session, store_id, file_id)
    if chunks:
        await session.execute(
            insert(VectorStoreChunkRow),
            [
                {"vector_store_id": store_id, "file_id": file_id, "position": index, "text": body, "embedding": data}
                for index, (body, data) in enumerate(chunks)
            ],
        )
    return True


async def fail_indexing(
    session: AsyncSession, store_id: str, file_id: str, owner: str | None, code: str, message: str
) -> bool:
    """Mark the file failed with a reason (`owner` None: whoever holds it, for a file given up)."""
    conditions = [
        VectorStoreFileRow.vector_store_id == store_id,
        VectorStoreFileRow.id == file_id,
        VectorStoreFileRow.status == "in_progress",
    ]
    if owner is not None:
        conditions.append(VectorStoreFileRow.claimed_by == owner)
    result = await session.execute(
        update(VectorStoreFileRow)
        .where(*conditions)
        .values(
            status="failed",
            last_error_code=code,
            last_error_message=message[:2000],
            claimed_by=None,
            lease_expires_at=None,
        )
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


async def exhausted(session: AsyncSession, *, max_attempts: int, limit: int) -> list[tuple[str, str]]:
    """Files still in progress whose every attempt was lost (the last claim expired too): (store id, file id)."""
    rows = await session.execute(
        select(VectorStoreFileRow.vector_store_id, VectorStoreFileRow.id)
        .where(*_claimable(session), VectorStoreFileRow.attempts >= max_attempts)
        .limit(limit)
    )
    return [(store_id, file_id) for store_id, file_id in rows.all()]


async def delete_chunks(session: AsyncSession, store_id: str, file_id: str | None = None) -> None:
    """A file's chunks in a store (every file's: `file_id` None)."""
    statement = delete(VectorStoreChunkRow).where(VectorStoreChunkRow.vector_store_id == store_id)
    if file_id is not None:
        statement = statement.where(VectorStoreChunkRow.file_id == file_id)
    await session.execute(statement)


async def embedding_model_of(session: AsyncSession, store_id: str) -> str | None:
    """The embedding model a store's chunks are embedded with (None: none, or no such store)."""
    query = select(VectorStoreRow.embedding_model).where(VectorStoreRow.id == store_id)
    return (await session.execute(query)).scalar_one_or_none()


async def stores_of(session: AsyncSession, tenant: str, store_ids: Sequence[str]) -> list[VectorStoreRow]:
    """The tenant's stores among `store_ids` (another tenant's are absent, as missing ones are)."""
    rows = await session.execute(
        select(VectorStoreRow).where(VectorStoreRow.tenant == tenant, VectorStoreRow.id.in_(store_ids))
    )
    return list(rows.scalars())


#: A store searched again within this long is not marked active again (one write a minute, not one a search).
TOUCH_EVERY = timedelta(seconds=60)


async def touch_stores(session: AsyncSession, stores: Sequence[VectorStoreRow], now: datetime) -> None:
    """Mark the stores active now: their expiry (expires_after, anchored at last_active_at) moves with it."""
    for store in stores:
        if now - store.last_active_at < TOUCH_EVERY:
            continue
        values: dict[str, Any] = {"last_active_at": now}
        if store.expires_after_days is not None:
            values["expires_at"] = now + timedelta(days=store.expires_after_days)
        await session.execute(update(VectorStoreRow).where(VectorStoreRow.id == store.id).values(**values))
