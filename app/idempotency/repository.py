"""Every query on idempotency keys: read one, claim one (the first insert wins, on every node), take an expired or
abandoned one over, mark one done, release one, purge expired ones. Each write but the insert is conditional on
the claim that holds the key: a request that lost its key to a retry changes nothing. When a claim was made, when
its window ends and whether it was abandoned are the database's clock's to say (app/db/clock.py), not a node's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.clock import database_in, database_now
from app.db.models import IdempotencyKeyRow

RUNNING = "running"
DONE = "done"


def _insert(session: AsyncSession) -> Callable[..., Any]:
    """INSERT in the dialect's own form (its ON CONFLICT clause)."""
    return postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert


def _changed(result: Any) -> int:
    return int(getattr(result, "rowcount", 0))


@dataclass(frozen=True, slots=True)
class KeyState:
    """A key's row, and what the database's clock says of it."""

    row: IdempotencyKeyRow
    #: Its window ended: the key is a new create's.
    expired: bool
    #: Its request still runs after longer than a request may hold it (its process died): to be taken over.
    abandoned: bool


def _claimed_now(session: AsyncSession, window_s: float) -> dict[str, Any]:
    return {"claimed_at": database_now(session), "expires_at": database_in(session, window_s)}


async def get_key(session: AsyncSession, tenant: str, key: str, *, abandoned_s: float) -> KeyState | None:
    """The key's row, expired or abandoned (held by a running request for over `abandoned_s`) by the database's
    clock."""
    row = IdempotencyKeyRow
    query = select(
        row,
        row.expires_at <= database_now(session),
        and_(row.state == RUNNING, row.claimed_at < database_in(session, -abandoned_s)),
    ).where(row.tenant == tenant, row.key == key)
    found = (await session.execute(query)).one_or_none()
    return None if found is None else KeyState(found[0], bool(found[1]), bool(found[2]))


async def insert_claim(session: AsyncSession, values: dict[str, Any], *, window_s: float) -> bool:
    """A new row, running, for `window_s`; False when the tenant's key is already there (another request, perhaps
    on another node, was first): one statement, so that two at once cannot both win."""
    statement = _insert(session)(IdempotencyKeyRow).values(state=RUNNING, **values, **_claimed_now(session, window_s))
    result = await session.execute(statement.on_conflict_do_nothing(index_elements=["tenant", "key"]))
    return _changed(result) == 1


async def take_over(
    session: AsyncSession, tenant: str, key: str, held_by: str, values: dict[str, Any], *, window_s: float
) -> bool:
    """The row claimed anew for `window_s` (expired, or its request abandoned) if `held_by` still holds it: of two
    retries that found it so, one wins."""
    query = (
        update(IdempotencyKeyRow)
        .where(IdempotencyKeyRow.tenant == tenant, IdempotencyKeyRow.key == key, IdempotencyKeyRow.claim_id == held_by)
        .values(state=RUNNING, answer=None, status_code=None, **values, **_claimed_now(session, window_s))
    )
    return _changed(await session.execute(query)) == 1


async def mark_done(session: AsyncSession, tenant: str, key: str, claim_id: str, values: dict[str, Any]) -> bool:
    """The claim's answer (or its response) kept; False when the claim no longer holds the key."""
    query = (
        update(IdempotencyKeyRow)
        .where(
            IdempotencyKeyRow.tenant == tenant,
            IdempotencyKeyRow.key == key,
            IdempotencyKeyRow.claim_id == claim_id,
            IdempotencyKeyRow.state == RUNNING,
        )
        .values(state=DONE, **values)
    )
    return _changed(await session.execute(query)) == 1


async def delete_claim(session: AsyncSession, tenant: str, key: str, claim_id: str, *, running_only: bool) -> None:
    """Forget the key if this claim still holds it (`running_only`: unless its request already answered)."""
    query = delete(IdempotencyKeyRow).where(
        IdempotencyKeyRow.tenant == tenant, IdempotencyKeyRow.key == key, IdempotencyKeyRow.claim_id == claim_id
    )
    if running_only:
        query = query.where(IdempotencyKeyRow.state == RUNNING)
    await session.execute(query)


async def purge_expired(session: AsyncSession, *, now: datetime, limit: int) -> int:
    """Drop up to `limit` keys whose window ended before `now`; how many (one statement: row values compare on
    SQLite and Postgres alike)."""
    old = select(IdempotencyKeyRow.tenant, IdempotencyKeyRow.key).where(IdempotencyKeyRow.expires_at < now).limit(limit)
    query = delete(IdempotencyKeyRow).where(tuple_(IdempotencyKeyRow.tenant, IdempotencyKeyRow.key).in_(old))
    return _changed(await session.execute(query))
