"""The cache of finished responses' JSON that GET /v1/responses/{id} answers from: a response that ended changes
rarely (a delete, a retention purge), so each process keeps the JSON it last sent, under the row's `updated_at`.
A hit still asks the database for that `updated_at` (one indexed column, no ORM object, no validation, no dump):
a row deleted or changed on any node is then never served stale; only the answer's building is saved."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class CachedJson:
    #: The stored row's updated_at when `body` was built: the entry holds only while the row still has it.
    version: datetime
    body: bytes


class ResponseJsonCache:
    """Least recently used entries up to `max_bytes` of JSON in all (0: nothing is kept). Keyed by tenant,
    response id and the `include` values, so that one tenant never reads another's entry, nor a read with
    includes one without."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str, frozenset[str]], CachedJson] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def get(self, tenant: str, response_id: str, includes: frozenset[str]) -> CachedJson | None:
        key = (tenant, response_id, includes)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, tenant: str, response_id: str, includes: frozenset[str], entry: CachedJson) -> None:
        if len(entry.body) > self.max_bytes:
            return
        self.discard(tenant, response_id, includes)
        self._entries[(tenant, response_id, includes)] = entry
        self._bytes += len(entry.body)
        while self._bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= len(evicted.body)

    def discard(self, tenant: str, response_id: str, includes: frozenset[str]) -> None:
        entry = self._entries.pop((tenant, response_id, includes), None)
        if entry is not None:
            self._bytes -= len(entry.body)
