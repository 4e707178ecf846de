"""The per-process cache of vector stores' embeddings, as one matrix a store: a search by embedding reads a store's
vectors from the database once, then only checks that they are still the same (their count and newest chunk id:
an indexed file adds chunks with higher ids, a detached one takes some away) and ranks from memory."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

#: A store's chunks as last read: how many embedded chunks it had, and the highest chunk id among them.
Revision = tuple[int, int]


@dataclass(frozen=True, slots=True)
class StoreVectors:
    revision: Revision
    #: Per row: its chunk's id and file id; the rows of `matrix` are the chunks' unit vectors (float32).
    chunk_ids: np.ndarray
    file_ids: np.ndarray
    matrix: np.ndarray

    @property
    def size_bytes(self) -> int:
        return int(self.matrix.nbytes + self.chunk_ids.nbytes + self.file_ids.nbytes)


class StoreVectorCache:
    """Least recently used stores' vectors up to `max_bytes` in all (0: nothing is kept)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, StoreVectors] = OrderedDict()
        self._bytes = 0

    def get(self, store_id: str, revision: Revision) -> StoreVectors | None:
        entry = self._entries.get(store_id)
        if entry is None or entry.revision != revision:
            return None
        self._entries.move_to_end(store_id)
        return entry

    def put(self, store_id: str, entry: StoreVectors) -> None:
        self._drop(store_id)
        if entry.size_bytes > self.max_bytes:
            return
        self._entries[store_id] = entry
        self._bytes += entry.size_bytes
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, store_id: str) -> None:
        entry = self._entries.pop(store_id, None)
        if entry is not None:
            self._bytes -= entry.size_bytes
