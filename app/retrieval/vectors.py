"""Embeddings as stored (little-endian float32 bytes, length 1) and ranked in this process by cosine similarity.

NOTE: pgvector is not packaged for the Postgres this project runs, and this Python's sqlite3 cannot load sqlite-vec
(it is built without extension loading): vectors are read from the database and compared here, with numpy, up to
RESPONSES_VECTOR_SEARCH_MAX_CHUNKS a search."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

FLOAT32 = np.dtype("<f4")


def pack(vector: Sequence[float]) -> bytes:
    array = np.asarray(vector, dtype=FLOAT32)
    norm = float(np.linalg.norm(array))
    return (array / norm if norm > 0 else array).astype(FLOAT32).tobytes()


def nearest(query: Sequence[float], rows: Sequence[tuple[int, bytes]], limit: int) -> list[tuple[int, float]]:
    """The `limit` rows (id, packed vector) most similar to `query`: (id, cosine similarity), best first. Rows of
    another size than the query (embedded by another model) are left out."""
    target = np.asarray(query, dtype=np.float32)
    norm = float(np.linalg.norm(target))
    if norm == 0 or not rows:
        return []
    target = target / norm
    width = target.shape[0] * FLOAT32.itemsize
    kept = [(chunk_id, data) for chunk_id, data in rows if len(data) == width]
    if not kept:
        return []
    matrix = np.frombuffer(b"".join(data for _, data in kept), dtype=FLOAT32).reshape(len(kept), -1)
    similarities = matrix @ target
    count = min(limit, len(kept))
    best = np.argpartition(-similarities, count - 1)[:count]
    best = best[np.argsort(-similarities[best], kind="stable")]
    return [(kept[index][0], float(similarities[index])) for index in best]
