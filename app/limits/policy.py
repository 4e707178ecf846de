"""The limits that apply to one tenant (`TenantLimits`), and the one interface every limit check asks for them
(`LimitsPolicy`): the server's settings for every tenant (`FixedLimits`), or a project's own overrides over them
(app/keys/limits_cache.py: read from the database behind a short per-node cache)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """What one tenant may do; 0 turns a limit off, as the server's settings do."""

    requests_per_min: int = 0
    tokens_per_min: int = 0
    #: Requests in flight on one API process at once.
    max_concurrent_requests: int = 0
    #: Background responses stored and not yet started, across every node.
    max_queued_background: int = 0
    #: Bytes of stored data (app/quotas/stored_bytes.py).
    max_stored_bytes: int = 0

    @property
    def rate_limited(self) -> bool:
        """Whether either per-minute limit is on (else no bucket is read)."""
        return bool(self.requests_per_min or self.tokens_per_min)


class LimitsPolicy(Protocol):
    """Answers the limits of a tenant (perhaps a few seconds late)."""

    async def limits_of(self, tenant: str) -> TenantLimits: ...


class FixedLimits:
    """The same limits for every tenant: the server's settings where no project overrides them."""

    def __init__(self, limits: TenantLimits | None = None) -> None:
        self.limits = limits or TenantLimits()

    async def limits_of(self, tenant: str) -> TenantLimits:
        return self.limits
