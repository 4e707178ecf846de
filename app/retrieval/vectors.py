"""Embeddings as stored (little-endian float32 bytes, length 1) and ranked in this process by cosine similarity.

NOTE: pgvector is not packaged for the Postgres this project runs, and this Python's sqlite3 cannot load sqlite-vec
(it is built without extension loading): vectors are read from the database (once a store, then kept while they do
not change: app/read_cache/vectors.py) and compared here, with numpy, up to RESPONSES_VECTOR_SEARCH_MAX_CHUNKS a
search."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.read_cache.vectors import Revision, StoreVectors

FLOAT32 = np.dtype("<f4")


def pack(vector: Sequence[float]) -> bytes:
    array = np.asarray(vector, dtype=FLOAT32)
    norm = float(np.linalg.norm(array))
    return (array / norm if norm > 0 else array).astype(FLOAT32).tobytes()


def store_vectors(revision: Revision, rows: Sequence[tuple[int, str, bytes]]) -> StoreVectors:
    """A store's embedded chunks (id, file id, packed vector) as one matrix; rows of another width than the first
    (embedded by another model) are left out."""
    width = len(rows[0][2]) if rows else 0
    kept = [row for row in rows if len(row[2]) == width]
    matrix = np.frombuffer(b"".join(data for _, _, data in kept), dtype=FLOAT32).reshape(len(kept), width // 4)
    return StoreVectors(
        revision,
        np.asarray([chunk_id for chunk_id, _, _ in kept], dtype=np.int64),
        np.asarray([file_id for _, file_id, _ in kept], dtype=object),
        matrix,
    )


def nearest_in(
    query: Sequence[float], stores: Sequence[StoreVectors], file_ids: Sequence[str] | None, limit: int
) -> list[tuple[int, float]]:
    """The `limit` chunks of `stores` (of `file_ids` only, where given) most similar to `query`, best first."""
    target = np.asarray(query, dtype=np.float32)
    norm = float(np.linalg.norm(target))
    if norm == 0:
        return []
    target = target / norm
    found: list[tuple[int, float]] = []
    wanted = set(file_ids) if file_ids is not None else None
    for store in stores:
        if store.matrix.shape[0] == 0 or store.matrix.shape[1] != target.shape[0]:
            continue
        similarities = store.matrix @ target
        if wanted is not None:
            mask = np.fromiter((file_id in wanted for file_id in store.file_ids), dtype=bool, count=len(store.file_ids))
            similarities = np.where(mask, similarities, -np.inf)
        count = min(limit, similarities.shape[0])
        best = np.argpartition(-similarities, count - 1)[:count]
        found.extend(
            (int(store.chunk_ids[index]), float(similarities[index]))
            for index in best
            if np.isfinite(similarities[index])
        )
    return sorted(found, key=lambda hit: -hit[1])[:limit]
