"""What an API node knows of the keys in the database: each key's identity as read at most
RESPONSES_KEY_CACHE_TTL_S ago (so a revoked key stops working on every node within that time), and whether the
database holds any key at all (what keeps a server open), read as seldom."""

from __future__ import annotations

import hmac
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from app.db.base import utc_now
from app.db.session import Database
from app.errors import outage_error
from app.keys import repository
from app.tenants.identity import Identity, as_role, tenant_of_project

T = TypeVar("T")

#: Keys remembered at once (valid and unknown alike): a client sending random keys cannot grow the cache beyond
#: this; the oldest entries go first.
MAX_ENTRIES = 10_000
#: A key's `last_used_at` is written at most this often (a write per request would be one per request).
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class _Entry:
    identity: Identity | None
    read_at_s: float


class KeyCache:
    """A `KeyLookup` (app/tenants/identity.py) over the database, cached per node for `ttl_s` seconds.

    NOTE: in memory on purpose: it is a copy of the database a few seconds old, and each node keeps its own.
    """

    def __init__(
        self,
        database: Database,
        ttl_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self._database = database
        self._ttl_s = ttl_s
        self._clock = clock
        self._max_entries = max_entries
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        #: Whether a project id exists, as read at the time (bounded like the keys).
        self._projects: OrderedDict[str, tuple[bool, float]] = OrderedDict()
        #: Once a key exists the server is keyed for good: keys are revoked, never deleted, so this never
        #: goes back to False (revoking the last key does not open the server).
        self._keyed = False
        self._keyed_read_at_s: float | None = None

    async def find(self, key_hash: str) -> Identity | None:
        now_s = self._clock()
        entry = self._entries.get(key_hash)
        if entry is not None and now_s - entry.read_at_s < self._ttl_s:
            return entry.identity
        identity = await _answering_outages(lambda: self._read(key_hash))
        self._entries[key_hash] = _Entry(identity, now_s)
        self._entries.move_to_end(key_hash)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
        return identity

    async def project_exists(self, project_id: str) -> bool:
        now_s = self._clock()
        known = self._projects.get(project_id)
        if known is not None and now_s - known[1] < self._ttl_s:
            return known[0]
        exists = await _answering_outages(lambda: self._read_project(project_id))
        self._projects[project_id] = (exists, now_s)
        self._projects.move_to_end(project_id)
        while len(self._projects) > self._max_entries:
            self._projects.popitem(last=False)
        return exists

    async def any_keys(self) -> bool:
        if self._keyed:
            return True
        now_s = self._clock()
        if self._keyed_read_at_s is not None and now_s - self._keyed_read_at_s < self._ttl_s:
            return False
        self._keyed = await _answering_outages(self._read_any)
        self._keyed_read_at_s = now_s
        return self._keyed

    async def _read(self, key_hash: str) -> Identity | None:
        async with self._database.read() as session:
            row = await repository.key_by_hash(session, key_hash)
        # The index found it by hash; the hash itself is compared in constant time.
        if row is None or not hmac.compare_digest(row.key_hash, key_hash) or row.revoked_at is not None:
            return None
        role = as_role(row.role)
        if role is None:  # not a role this server knows: no access rather than a guess
            return None
        now = utc_now()
        if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
            async with self._database.transaction() as session:
                await repository.note_use(session, row.id, now)
        return Identity(tenant=tenant_of_project(row.project_id), role=role, key_id=row.id)

    async def _read_project(self, project_id: str) -> bool:
        async with self._database.read() as session:
            return await repository.project_exists(session, project_id)

    async def _read_any(self) -> bool:
        async with self._database.read() as session:
            return await repository.any_key(session)


async def _answering_outages(read: Callable[[], Awaitable[T]]) -> T:
    """The read, or the 503 an unreachable database stands for (HTTP and WebSocket alike)."""
    try:
        return await read()
    except Exception as error:
        unavailable = outage_error(error)
        if unavailable is None:
            raise
        raise unavailable from error
