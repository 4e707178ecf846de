"""How many requests each tenant has in flight on this process, and the 429 for one too many; the 429 for one
background job too many queued."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from app.errors import RateLimited

#: Seconds a refused client is told to wait: in-flight requests end within seconds to minutes, so a short wait
#: and a retry beats a long one.
RETRY_AFTER_S = 1
#: Seconds a client refused for its queued background jobs is told to wait: one of them must start first, which
#: takes at least one generation's time.
QUEUED_RETRY_AFTER_S = 10


def check_queued_background(queued: int, limit: int) -> None:
    """A 429 with Retry-After when a tenant with `queued` background responses waiting may not queue one more
    (`limit` 0: no cap)."""
    if limit and queued >= limit:
        raise RateLimited(
            f"Too many background responses queued: this server keeps at most {limit} queued for each API key. "
            "Retry when some of them have started.",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(QUEUED_RETRY_AFTER_S)},
        )


class TenantSlots:
    """Counts per tenant, in this process only (an API node's own load; each node counts its own clients).

    NOTE: held in memory on purpose: a count of open connections dies with them, so it has nothing to persist.
    """

    def __init__(self, limit: int, *, what: str = "requests in flight") -> None:
        #: Most requests (or connections) one tenant may have at once, unless its caller names its own; 0: no limit.
        self.limit = limit
        #: What is counted, as the 429 names it.
        self.what = what
        self._in_flight: Counter[str] = Counter()

    def in_flight(self, tenant: str) -> int:
        return self._in_flight[tenant]

    def acquire(self, tenant: str, limit: int | None = None) -> None:
        """Take one of `tenant`'s slots, or a 429 with Retry-After when it has none left. `limit`: the tenant's own
        (its project's), else the server's."""
        limit = self.limit if limit is None else limit
        if limit and self._in_flight[tenant] >= limit:
            raise RateLimited(
                f"Too many {self.what}: this server allows at most {limit} at once for each API key. "
                "Retry when one of them has finished.",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self._in_flight[tenant] += 1

    def release(self, tenant: str) -> None:
        self._in_flight[tenant] -= 1
        if self._in_flight[tenant] <= 0:
            del self._in_flight[tenant]

    @contextmanager
    def hold(self, tenant: str, limit: int | None = None) -> Iterator[None]:
        """One of `tenant`'s slots for the block (see acquire)."""
        self.acquire(tenant, limit)
        try:
            yield
        finally:
            self.release(tenant)
