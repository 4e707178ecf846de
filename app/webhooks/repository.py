"""Queries on webhook endpoints and their deliveries: the CRUD of endpoints, the outbox's inserts, the claim of due
deliveries (one process an attempt), an attempt's outcome, and the pages of both lists."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.clock import database_in, database_now
from app.db.models import WebhookDeliveryRow, WebhookEndpointRow
from app.db.paging import page_by_creation


def _updated(result: object) -> int:
    return int(getattr(result, "rowcount", 0))


# Endpoints


async def insert_endpoint(session: AsyncSession, row: WebhookEndpointRow) -> None:
    session.add(row)
    await session.flush()


async def lock_tenant_endpoints(session: AsyncSession, tenant: str) -> None:
    """Serialise the tenant's endpoint creates until the commit, so that a count after an insert sees every other
    one: on Postgres a transaction-scoped advisory lock; SQLite's insert already takes its one writer lock."""
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(select(func.pg_advisory_xact_lock(func.hashtext("webhook_endpoints:" + tenant))))


async def count_endpoints(session: AsyncSession, tenant: str) -> int:
    query = select(func.count()).select_from(WebhookEndpointRow).where(WebhookEndpointRow.tenant == tenant)
    return int((await session.execute(query)).scalar_one())


async def get_endpoint(session: AsyncSession, endpoint_id: str, tenant: str) -> WebhookEndpointRow | None:
    query = select(WebhookEndpointRow).where(WebhookEndpointRow.id == endpoint_id, WebhookEndpointRow.tenant == tenant)
    return (await session.execute(query)).scalar_one_or_none()


async def page_endpoints(
    session: AsyncSession, tenant: str, *, limit: int, order: Literal["asc", "desc"], after: WebhookEndpointRow | None
) -> tuple[list[WebhookEndpointRow], bool]:
    query = select(WebhookEndpointRow).where(WebhookEndpointRow.tenant == tenant)
    return await page_by_creation(session, WebhookEndpointRow, query, limit=limit, order=order, after=after)


async def update_endpoint(session: AsyncSession, endpoint_id: str, tenant: str, values: dict[str, Any]) -> bool:
    query = (
        update(WebhookEndpointRow)
        .where(WebhookEndpointRow.id == endpoint_id, WebhookEndpointRow.tenant == tenant)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return _updated(await session.execute(query)) == 1


async def delete_endpoint(session: AsyncSession, endpoint_id: str, tenant: str) -> bool:
    """The endpoint and its deliveries (those still pending are not sent)."""
    if await get_endpoint(session, endpoint_id, tenant) is None:
        return False
    await session.execute(delete(WebhookDeliveryRow).where(WebhookDeliveryRow.endpoint_id == endpoint_id))
    await session.execute(delete(WebhookEndpointRow).where(WebhookEndpointRow.id == endpoint_id))
    return True


async def subscribed_endpoints(session: AsyncSession, tenant: str, event_type: str) -> list[str]:
    """The ids of the tenant's enabled endpoints that take `event_type` (filtered here: JSON arrays are queried
    differently by every database, and a tenant has few endpoints)."""
    query = select(WebhookEndpointRow.id, WebhookEndpointRow.event_types).where(
        WebhookEndpointRow.tenant == tenant, WebhookEndpointRow.status == "enabled"
    )
    return [endpoint_id for endpoint_id, types in (await session.execute(query)).all() if event_type in types]


async def endpoints_by_id(session: AsyncSession, endpoint_ids: Sequence[str]) -> dict[str, WebhookEndpointRow]:
    query = select(WebhookEndpointRow).where(WebhookEndpointRow.id.in_(endpoint_ids))
    return {row.id: row for row in (await session.execute(query)).scalars()}


async def record_endpoint_outcome(
    session: AsyncSession, endpoint_id: str, *, succeeded: bool, now: datetime, disable_failing_since: datetime
) -> bool:
    """A success clears the endpoint's failing streak; a failure starts one (or goes on with it), and disables the
    endpoint when the streak began before `disable_failing_since`. Whether it was disabled now."""
    endpoint = WebhookEndpointRow
    if succeeded:
        await session.execute(
            update(endpoint)
            .where(endpoint.id == endpoint_id, endpoint.failing_since.is_not(None))
            .values(failing_since=None)
            .execution_options(synchronize_session=False)
        )
        return False
    await session.execute(
        update(endpoint)
        .where(endpoint.id == endpoint_id, endpoint.failing_since.is_(None))
        .values(failing_since=now)
        .execution_options(synchronize_session=False)
    )
    disabled = await session.execute(
        update(endpoint)
        .where(
            endpoint.id == endpoint_id,
            endpoint.status == "enabled",
            endpoint.failing_since <= disable_failing_since,
        )
        .values(status="disabled", updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return _updated(disabled) == 1


# Deliveries


async def insert_deliveries(session: AsyncSession, rows: Sequence[WebhookDeliveryRow]) -> None:
    session.add_all(rows)
    await session.flush()


@dataclass(frozen=True, slots=True)
class ClaimBounds:
    """How many deliveries a claim may take: in all, and of each tenant and each endpoint (what the claimer has in
    flight already counted out), so that one tenant's backlog never fills a round another tenant's delivery waits
    behind."""

    limit: int
    per_tenant: int
    per_endpoint: int
    #: Endpoints and tenants the claimer can take none of now (their slots are all held).
    busy_endpoints: frozenset[str] = frozenset()
    busy_tenants: frozenset[str] = frozenset()


async def due_fairly(session: AsyncSession, *, bounds: ClaimBounds) -> list[tuple[str, str, str]]:
    """(id, tenant, endpoint id) of due deliveries (by the database's clock: a claim's expiry is judged by it),
    oldest first within each endpoint and each tenant, taken in turns across tenants (every tenant's oldest, then
    every tenant's second...): at most `per_endpoint` of an endpoint, `per_tenant` of a tenant and `limit` in all.
    Window functions: SQLite and Postgres alike."""
    row = WebhookDeliveryRow
    due = select(row.id, row.tenant, row.endpoint_id, row.next_attempt_at).where(
        row.status == "pending", row.next_attempt_at <= database_now(session)
    )
    if bounds.busy_endpoints:
        due = due.where(row.endpoint_id.not_in(sorted(bounds.busy_endpoints)))
    if bounds.busy_tenants:
        due = due.where(row.tenant.not_in(sorted(bounds.busy_tenants)))
    by_endpoint = due.add_columns(
        func.row_number().over(partition_by=row.endpoint_id, order_by=(row.next_attempt_at, row.id)).label("rank")
    ).subquery()
    kept = select(
        by_endpoint.c.id,
        by_endpoint.c.tenant,
        by_endpoint.c.endpoint_id,
        by_endpoint.c.next_attempt_at,
        func.row_number()
        .over(partition_by=by_endpoint.c.tenant, order_by=(by_endpoint.c.next_attempt_at, by_endpoint.c.id))
        .label("turn"),
    ).where(by_endpoint.c.rank <= bounds.per_endpoint)
    by_tenant = kept.subquery()
    query = (
        select(by_tenant.c.id, by_tenant.c.tenant, by_tenant.c.endpoint_id)
        .where(by_tenant.c.turn <= bounds.per_tenant)
        .order_by(by_tenant.c.turn, by_tenant.c.next_attempt_at, by_tenant.c.id)
        .limit(bounds.limit)
    )
    return [(found.id, found.tenant, found.endpoint_id) for found in (await session.execute(query)).all()]


async def claim(session: AsyncSession, ids: Sequence[str], *, token: str, claim_s: float) -> list[WebhookDeliveryRow]:
    """Claim these deliveries for one attempt each, those still due: their next attempt moves `claim_s` ahead
    (when a claimer that died leaves them due again) under `token`. The update is conditional on the row being due
    still, so of two processes claiming at once (SQLite, or Postgres without the row locks) one gets each row; on
    Postgres SKIP LOCKED also lets them pass over the rows another is claiming instead of waiting on it. The claim's
    expiry is written and judged by the database's clock (app/db/clock.py): a claimer whose clock runs fast takes
    no delivery another is still sending."""
    if not ids:
        return []
    if session.get_bind().dialect.name == "postgresql":
        lock = select(WebhookDeliveryRow.id).where(WebhookDeliveryRow.id.in_(ids)).with_for_update(skip_locked=True)
        ids = list((await session.execute(lock)).scalars())
        if not ids:
            return []
    await session.execute(
        update(WebhookDeliveryRow)
        .where(
            WebhookDeliveryRow.id.in_(ids),
            WebhookDeliveryRow.status == "pending",
            WebhookDeliveryRow.next_attempt_at <= database_now(session),
        )
        .values(
            claim_token=token,
            next_attempt_at=database_in(session, claim_s),
            attempts=WebhookDeliveryRow.attempts + 1,
            last_attempt_at=database_now(session),
        )
        .execution_options(synchronize_session=False)
    )
    claimed = select(WebhookDeliveryRow).where(WebhookDeliveryRow.claim_token == token)
    return list((await session.execute(claimed.execution_options(populate_existing=True))).scalars())


async def finish_attempt(session: AsyncSession, delivery_id: str, *, token: str, values: dict[str, Any]) -> bool:
    """Store an attempt's outcome if the claim is still `token`'s (else a later claim owns the delivery now)."""
    query = (
        update(WebhookDeliveryRow)
        .where(
            WebhookDeliveryRow.id == delivery_id,
            WebhookDeliveryRow.claim_token == token,
            WebhookDeliveryRow.status == "pending",
        )
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return _updated(await session.execute(query)) == 1


async def get_delivery(session: AsyncSession, delivery_id: str, endpoint_id: str) -> WebhookDeliveryRow | None:
    query = select(WebhookDeliveryRow).where(
        WebhookDeliveryRow.id == delivery_id, WebhookDeliveryRow.endpoint_id == endpoint_id
    )
    return (await session.execute(query)).scalar_one_or_none()


async def page_deliveries(
    session: AsyncSession,
    endpoint_id: str,
    *,
    limit: int,
    order: Literal["asc", "desc"],
    after: WebhookDeliveryRow | None,
) -> tuple[list[WebhookDeliveryRow], bool]:
    query = select(WebhookDeliveryRow).where(WebhookDeliveryRow.endpoint_id == endpoint_id)
    return await page_by_creation(session, WebhookDeliveryRow, query, limit=limit, order=order, after=after)


async def delete_finished(session: AsyncSession, *, created_before: datetime, limit: int) -> int:
    """Drop up to `limit` delivered or failed deliveries created before `created_before`; how many."""
    old = (
        select(WebhookDeliveryRow.id)
        .where(WebhookDeliveryRow.status != "pending", WebhookDeliveryRow.created_at < created_before)
        .limit(limit)
    )
    ids = list((await session.execute(old)).scalars())
    if not ids:
        return 0
    return _updated(await session.execute(delete(WebhookDeliveryRow).where(WebhookDeliveryRow.id.in_(ids))))
