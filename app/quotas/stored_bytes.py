"""The stored-bytes quota: the limit a tenant has, the charge (and the 429) of a write that stores data, and the
periodic measurement that corrects the counters.

How it counts (the trade-off): a measurement sums every tenant's rows, one query a table, every
RESPONSES_STORED_BYTES_MEASURE_INTERVAL_S on every API node; too slow to run on each write, so each write that
stores data adds its size at once, in its own unit of work (a file's bytes exactly, a response's or a
conversation's JSON), and the check reads one row. What a write cannot know is left to the next measurement:
deletions and retention (a tenant over its quota deletes, and is under again once measured), and a response's
generated output and events (bounded by its output tokens).

NOTE: writes are charged only while the tenant has a limit; with none, the counters are the measurements alone."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import utc_now
from app.db.session import Database
from app.errors import QuotaExceeded
from app.quotas import repository
from app.runtime import Runtime


async def stored_bytes_limit(runtime: Runtime, tenant: str) -> int:
    """The most bytes `tenant` may keep stored; 0: no limit. The one place a tenant's limit is looked up: its
    project's own limit (`projects.max_stored_bytes`, through the limits policy), else the server's setting."""
    return (await runtime.policy.limits_of(tenant)).max_stored_bytes


def json_size(*values: object) -> int:
    """About the characters these values take as stored JSON: what a write of them adds."""
    return sum(len(json.dumps(value, default=str)) for value in values if value is not None)


def quota_exceeded(limit: int, used: int, added: int, measure_interval_s: float) -> QuotaExceeded:
    return QuotaExceeded(
        f"You exceeded your stored bytes quota: {used} bytes stored of the {limit} allowed, and this write would "
        f"add about {added} more. Delete stored responses, conversations or files to free space (deletions "
        f"count from the next measurement, within {measure_interval_s:g} seconds).",
        code="insufficient_quota",
    )


async def charge_stored_bytes(session: AsyncSession, runtime: Runtime, tenant: str, size: Callable[[], int]) -> None:
    """Charge a write of `size()` bytes to `tenant` in the caller's unit of work, or a 429 `insufficient_quota`
    (the caller's unit of work then rolls back, the charge with it) when its stored bytes are at its limit or the
    write would pass it. Call it last in the unit of work: on Postgres it holds the tenant's row until the commit.
    `size` is only called when the tenant has a limit (a large request's JSON is not measured for nothing)."""
    limit = await stored_bytes_limit(runtime, tenant)
    if not limit:
        return
    added = size()
    total = await repository.charge(session, tenant, added)
    used = total - added
    if used >= limit or total > limit:
        raise quota_exceeded(limit, used, added, runtime.settings.stored_bytes_measure_interval_s)


async def measure_stored_bytes(database: Database) -> int:
    """Measure every tenant's stored bytes and set the counters to it, keeping what writes charged meanwhile (see
    repository.record_measurement); how many tenants store anything. Safe on several nodes at once."""
    async with database.read() as session:
        # The counters first, then the measure: a charge between them counts twice, never not at all.
        seen = await repository.counters(session)
        totals = await repository.measure(session)
    async with database.transaction() as session:
        await repository.record_measurement(session, totals, seen, utc_now())
    return sum(1 for size in totals.values() if size)


@dataclass(frozen=True, slots=True)
class StoredBytes:
    """A tenant's stored bytes (as counted: the last measurement and the writes since) and its limit."""

    tenant: str
    bytes: int
    limit: int
    #: When the last measurement counted it; None before the first.
    measured_at: datetime | None


async def read_stored_bytes(runtime: Runtime, tenant: str) -> StoredBytes:
    async with runtime.database.read() as session:
        row = await repository.stored_bytes(session, tenant)
    limit = await stored_bytes_limit(runtime, tenant)
    if row is None:
        return StoredBytes(tenant=tenant, bytes=0, limit=limit, measured_at=None)
    return StoredBytes(tenant=tenant, bytes=row.bytes, limit=limit, measured_at=row.measured_at)
