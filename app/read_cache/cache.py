"""The cache of finished responses' JSON that GET /v1/responses/{id} answers from: a response that ended changes
rarely (a delete, a retention purge), so each process keeps the JSON it last sent, under the row's `updated_at`.

Two ways an entry is known to be current. While this process hears every change of the `responses` table (a
notification a changed row: `listener.py`, Postgres LISTEN), an entry checked against the database less than
`staleness_s` ago and not named by a notification since is answered as it is, with no round trip: a notification
drops it as soon as it arrives (milliseconds after the change's commit), and the bound holds even for one that
never arrives. Otherwise (no listener, SQLite, the listener reconnecting, the bound passed) a hit asks the
database for the row's `updated_at` (one indexed column) and answers the kept bytes while it is unchanged."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

#: How many notifications are remembered to tell a read that began before one of them (its answer is kept, but
#: checked before it is trusted); a read older than all of them is treated as if its row had changed.
REMEMBERED_CHANGES = 4096
#: The time a read is never trusted from: an entry kept with no ticket is checked before it is answered.
NEVER = float("-inf")

Key = tuple[str, str, frozenset[str]]
#: Where a tenant's list pages are kept: a key (tenant, PAGES, {the page's query}); no response id starts with "?".
#: Any change of one of the tenant's responses drops them all (one created may now head a page).
PAGES = "?pages"
#: A page's JSON has no version of its own: it is answered fresh or not at all.
NO_VERSION = datetime.min


@dataclass(frozen=True, slots=True)
class CachedJson:
    #: The stored row's updated_at when `body` was built: the entry holds only while the row still has it.
    version: datetime
    body: bytes


@dataclass(frozen=True, slots=True)
class ReadTicket:
    """When a read of the database began, and how many notifications had arrived by then: what it read is known
    to be current as of `at` unless a notification for its row came after `changes`."""

    at: float
    changes: int


@dataclass(slots=True)
class _Entry:
    json: CachedJson
    #: When the database last said `json.version` was current (this process's clock), or NEVER.
    checked_at: float


class ResponseJsonCache:
    """Least recently used entries up to `max_bytes` of JSON in all (0: nothing is kept). Keyed by tenant,
    response id and the `include` values, so that one tenant never reads another's entry, nor a read with
    includes one without. `staleness_s`: how long an entry is answered without a check while notifications
    arrive (0: every read checks)."""

    def __init__(
        self, max_bytes: int, *, staleness_s: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_bytes = max_bytes
        self.staleness_s = staleness_s
        self._clock = clock
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._bytes = 0
        #: The `include` sets each (tenant, response id) is kept under: a notification drops them all.
        self._includes: dict[tuple[str, str], set[frozenset[str]]] = {}
        #: Notifications so far, and the last REMEMBERED_CHANGES of them as (their number, tenant, response id).
        self._changes = 0
        self._recent: deque[tuple[int, str, str]] = deque(maxlen=REMEMBERED_CHANGES)
        #: Since when every change has been notified (the listener's LISTEN took effect); None: not listening.
        self._listening_since: float | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    @property
    def listening(self) -> bool:
        return self._listening_since is not None

    def ticket(self) -> ReadTicket:
        """Taken before a read of the database whose result may be kept (put) or confirm an entry."""
        return ReadTicket(self._clock(), self._changes)

    def fresh(self, tenant: str, response_id: str, includes: frozenset[str]) -> CachedJson | None:
        """The entry, when it may be answered with no round trip: notifications arrive, and it was checked after
        they began to and less than `staleness_s` ago."""
        entry = self._entries.get((tenant, response_id, includes))
        since = self._listening_since
        if entry is None or since is None or entry.checked_at < since:
            return None
        if self._clock() - entry.checked_at >= self.staleness_s:
            return None
        self._entries.move_to_end((tenant, response_id, includes))
        return entry.json

    def get(self, tenant: str, response_id: str, includes: frozenset[str]) -> CachedJson | None:
        """The entry, whether or not it is fresh: to answer once the database says its version is current."""
        key = (tenant, response_id, includes)
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry.json

    def put(
        self,
        tenant: str,
        response_id: str,
        includes: frozenset[str],
        json: CachedJson,
        ticket: ReadTicket | None = None,
    ) -> None:
        """Keep `json`, read from the database under `ticket` (none: checked before it is first answered)."""
        if len(json.body) > self.max_bytes:
            return
        self.discard(tenant, response_id, includes)
        key = (tenant, response_id, includes)
        self._entries[key] = _Entry(json, self._checked_at(tenant, response_id, ticket))
        self._includes.setdefault((tenant, response_id), set()).add(includes)
        self._bytes += len(json.body)
        while self._bytes > self.max_bytes:
            (old_tenant, old_id, old_includes), evicted = self._entries.popitem(last=False)
            self._bytes -= len(evicted.json.body)
            self._forget_includes(old_tenant, old_id, old_includes)

    def confirm(self, tenant: str, response_id: str, includes: frozenset[str], ticket: ReadTicket) -> None:
        """The database said, in a read begun under `ticket`, that the entry's version is current."""
        entry = self._entries.get((tenant, response_id, includes))
        if entry is not None:
            entry.checked_at = max(entry.checked_at, self._checked_at(tenant, response_id, ticket))

    def discard(self, tenant: str, response_id: str, includes: frozenset[str]) -> None:
        entry = self._entries.pop((tenant, response_id, includes), None)
        if entry is not None:
            self._bytes -= len(entry.json.body)
            self._forget_includes(tenant, response_id, includes)

    def changed(self, tenant: str, response_id: str) -> None:
        """A notification: the stored row changed (or went). Its entries go, and a read of it that began before
        now keeps what it read only as an entry to check."""
        self._changes += 1
        self._recent.append((self._changes, tenant, response_id))
        for kept in (response_id, PAGES):
            for includes in list(self._includes.get((tenant, kept), ())):
                self.discard(tenant, kept, includes)

    def fresh_page(self, tenant: str, query: str) -> bytes | None:
        """A list page of `tenant`'s (`query`: its filters and cursor), when it may be answered as it is: read
        while notifications arrive, less than `staleness_s` ago, and none of the tenant's responses changed since."""
        page = self.fresh(tenant, PAGES, frozenset((query,)))
        return None if page is None else page.body

    def put_page(self, tenant: str, query: str, body: bytes, ticket: ReadTicket) -> None:
        """Keep a list page read under `ticket`, if it can be answered fresh (nothing to check it against)."""
        if self._listening_since is not None and self._checked_at(tenant, PAGES, ticket) >= self._listening_since:
            self.put(tenant, PAGES, frozenset((query,)), CachedJson(NO_VERSION, body), ticket)

    def start_listening(self) -> None:
        """Every change from now on is notified: entries checked before now are checked again before they are
        trusted (a change made while nobody listened was never notified)."""
        self._listening_since = self._clock()

    def stop_listening(self) -> None:
        """Notifications may be missed from now on: every hit is checked against the database."""
        self._listening_since = None

    def _checked_at(self, tenant: str, response_id: str, ticket: ReadTicket | None) -> float:
        """When a read under `ticket` knew its row (or the tenant's pages: PAGES) current: the ticket's time, unless
        a notification for that row (for pages: any of the tenant's) arrived since, or too many arrived to tell."""
        if ticket is None:
            return NEVER
        if ticket.changes == self._changes:
            return ticket.at
        if not self._recent or self._recent[0][0] > ticket.changes + 1:
            return NEVER  # notifications newer than the ticket were forgotten: any of them may be this row's
        for number, changed_tenant, changed_id in reversed(self._recent):
            if number <= ticket.changes:
                break
            if changed_id == response_id or (response_id == PAGES and changed_tenant == tenant):
                return NEVER
        return ticket.at

    def _forget_includes(self, tenant: str, response_id: str, includes: frozenset[str]) -> None:
        kept = self._includes.get((tenant, response_id))
        if kept is not None:
            kept.discard(includes)
            if not kept:
                del self._includes[(tenant, response_id)]
