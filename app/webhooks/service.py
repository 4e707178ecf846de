"""Webhook endpoints: create, retrieve, update, list, delete, rotate the secret, send a test event; and the list of
an endpoint's deliveries (our extension)."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import utc_now
from app.db.models import WebhookDeliveryRow, WebhookEndpointRow
from app.db.session import Database
from app.errors import InvalidRequest, NotFound
from app.ids import new_id
from app.outbound.addresses import AllowedHosts, OutboundRefused, check_url
from app.outbound.client import OutboundFailed
from app.quotas.stored_bytes import charge_stored_bytes, json_size
from app.runtime import Runtime
from app.schemas.paging import PageRequest, cursor_page, page_after
from app.webhooks import repository
from app.webhooks.delivery import SECRET_PURPOSE, send
from app.webhooks.outbox import event_body
from app.webhooks.schemas import (
    DeletedWebhookEndpoint,
    RotateSecretRequest,
    TestRequest,
    WebhookDelivery,
    WebhookDeliveryList,
    WebhookEndpointCreateRequest,
    WebhookEndpointList,
    WebhookEndpointObject,
    WebhookEndpointTestResult,
    WebhookEndpointUpdateRequest,
    WebhookEndpointWithSecret,
)
from app.webhooks.signing import new_secret, secret_hint


def endpoint_not_found(endpoint_id: str) -> NotFound:
    return NotFound(f"Webhook endpoint with id '{endpoint_id}' not found.", param="webhook_endpoint_id")


def _seconds(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


def _endpoint(row: WebhookEndpointRow) -> WebhookEndpointObject:
    return WebhookEndpointObject(
        id=row.id,
        created_at=int(row.created_at.timestamp()),
        updated_at=_seconds(row.updated_at),
        event_types=list(row.event_types),
        name=row.name,
        url=row.url,
        signing_secret_hint=row.signing_secret_hint,
        status="disabled" if row.status == "disabled" else "enabled",
    )


def _with_secret(row: WebhookEndpointRow, secret: str) -> WebhookEndpointWithSecret:
    return WebhookEndpointWithSecret(**_endpoint(row).model_dump(), signing_secret=secret)


def _delivery(row: WebhookDeliveryRow) -> WebhookDelivery:
    return WebhookDelivery(
        id=row.id,
        webhook_endpoint_id=row.endpoint_id,
        event_id=row.event_id,
        event_type=row.event_type,
        data={"id": row.object_id},
        status="delivered" if row.status == "delivered" else "failed" if row.status == "failed" else "pending",
        attempts=row.attempts,
        created_at=int(row.created_at.timestamp()),
        last_attempt_at=_seconds(row.last_attempt_at),
        next_attempt_at=_seconds(row.next_attempt_at) if row.status == "pending" else None,
        delivered_at=_seconds(row.delivered_at),
        last_status_code=row.last_status_code,
        last_error=row.last_error,
    )


def _checked_url(url: str, runtime: Runtime) -> str:
    """A URL that can ever be delivered to, or a 400 naming `url` (a name resolving to a private address is refused
    at delivery instead: what it resolves to may change)."""
    try:
        check_url(url, AllowedHosts.parse(runtime.settings.outbound_allowed_hosts))
    except OutboundRefused as refused:
        raise InvalidRequest(f"Invalid 'url': {refused}", param="url", code="invalid_url") from None
    return url


def _seal(runtime: Runtime, tenant: str, secret: str) -> str:
    return runtime.sealer.seal({"secret": secret}, purpose=SECRET_PURPOSE, tenant=tenant)


async def _owned(session: AsyncSession, endpoint_id: str, tenant: str) -> WebhookEndpointRow:
    row = await repository.get_endpoint(session, endpoint_id, tenant)
    if row is None:
        raise endpoint_not_found(endpoint_id)
    return row


def _stored_size(row: WebhookEndpointRow) -> int:
    """What the endpoint's row keeps of the tenant's (as app/quotas measures it)."""
    return json_size(row.name, row.url, row.event_types, row.sealed_secret, row.previous_sealed_secret)


def endpoint_limit_reached(limit: int) -> InvalidRequest:
    return InvalidRequest(
        f"This project has {limit} webhook endpoints, the most it may have: delete one before creating another.",
        code="webhook_endpoint_limit_reached",
    )


async def create_endpoint(
    runtime: Runtime, tenant: str, body: WebhookEndpointCreateRequest
) -> WebhookEndpointWithSecret:
    """A new endpoint, within the project's cap on endpoints (checked after the insert, in its unit of work, so that
    concurrent creates see each other) and charged to its stored-bytes quota."""
    url = _checked_url(body.url, runtime)
    secret = new_secret()
    now = utc_now()
    row = WebhookEndpointRow(
        id=new_id("we"),
        tenant=tenant,
        name=body.name,
        url=url,
        event_types=list(body.event_types),
        status="enabled",
        sealed_secret=_seal(runtime, tenant, secret),
        signing_secret_hint=secret_hint(secret),
        created_at=now,
        updated_at=now,
    )
    limit = runtime.settings.webhook_max_endpoints_per_tenant
    async with runtime.database.transaction() as session:
        await repository.lock_tenant_endpoints(session, tenant)
        await repository.insert_endpoint(session, row)
        if limit and await repository.count_endpoints(session, tenant) > limit:
            raise endpoint_limit_reached(limit)
        await charge_stored_bytes(session, runtime, tenant, lambda: _stored_size(row))
    return _with_secret(row, secret)


async def _charge_growth(session: AsyncSession, runtime: Runtime, tenant: str, grown: int) -> None:
    """An update that stores more is charged what it adds (one that stores less counts from the next measurement)."""
    if grown > 0:
        await charge_stored_bytes(session, runtime, tenant, lambda: grown)


async def get_endpoint(database: Database, endpoint_id: str, tenant: str) -> WebhookEndpointObject:
    async with database.read() as session:
        return _endpoint(await _owned(session, endpoint_id, tenant))


async def update_endpoint(
    runtime: Runtime, endpoint_id: str, tenant: str, body: WebhookEndpointUpdateRequest
) -> WebhookEndpointObject:
    values: dict[str, Any] = {}
    if body.url is not None:
        values["url"] = _checked_url(body.url, runtime)
    if body.name is not None:
        values["name"] = body.name
    if body.event_types is not None:
        values["event_types"] = list(body.event_types)
    if body.status is not None:
        values["status"] = body.status
        if body.status == "enabled":
            values["failing_since"] = None  # a fresh start: the window counts from the next failure
    async with runtime.database.transaction() as session:
        row = await _owned(session, endpoint_id, tenant)
        changed = {key: value for key, value in values.items() if getattr(row, key) != value}
        if changed:
            before = _stored_size(row)
            changed["updated_at"] = utc_now()
            await repository.update_endpoint(session, endpoint_id, tenant, changed)
            await session.refresh(row)
            await _charge_growth(session, runtime, tenant, _stored_size(row) - before)
        return _endpoint(row)


async def list_endpoints(database: Database, tenant: str, page: PageRequest) -> WebhookEndpointList:
    async with database.read() as session:
        rows, has_more = await page_after(
            page,
            partial(repository.get_endpoint, session, tenant=tenant),
            lambda after: repository.page_endpoints(session, tenant, limit=page.limit, order=page.order, after=after),
            unknown_after=lambda after: f"Invalid 'after': no webhook endpoint '{after}'.",
        )
    return cursor_page(WebhookEndpointList, [_endpoint(row) for row in rows], has_more)


async def delete_endpoint(database: Database, endpoint_id: str, tenant: str) -> DeletedWebhookEndpoint:
    async with database.transaction() as session:
        if not await repository.delete_endpoint(session, endpoint_id, tenant):
            raise endpoint_not_found(endpoint_id)
    return DeletedWebhookEndpoint(id=endpoint_id)


async def rotate_secret(
    runtime: Runtime, endpoint_id: str, tenant: str, body: RotateSecretRequest
) -> WebhookEndpointWithSecret:
    """A new secret; the old one keeps signing beside it for RESPONSES_WEBHOOK_SECRET_GRACE_S when asked to."""
    secret = new_secret()
    now = utc_now()
    async with runtime.database.transaction() as session:
        row = await _owned(session, endpoint_id, tenant)
        keep = body.keep_old_secret_active_for_24_hours and runtime.settings.webhook_secret_grace_s > 0
        values: dict[str, Any] = {
            "sealed_secret": _seal(runtime, tenant, secret),
            "signing_secret_hint": secret_hint(secret),
            "previous_sealed_secret": row.sealed_secret if keep else None,
            "previous_secret_until": now + timedelta(seconds=runtime.settings.webhook_secret_grace_s) if keep else None,
            "updated_at": now,
        }
        before = _stored_size(row)
        await repository.update_endpoint(session, endpoint_id, tenant, values)
        await session.refresh(row)
        await _charge_growth(session, runtime, tenant, _stored_size(row) - before)
        return _with_secret(row, secret)


async def send_test_event(
    runtime: Runtime, endpoint_id: str, tenant: str, body: TestRequest
) -> WebhookEndpointTestResult:
    """Send a sample event of `event_type` now, signed as a real one (its data names no real object); what the
    receiver answered. Not stored, not retried. A tenant has RESPONSES_WEBHOOK_TESTS_PER_TENANT of them waiting on
    receivers at once (a 429 beyond): each may wait the whole attempt timeout on a receiver that never answers."""
    async with runtime.database.read() as session:
        row = await _owned(session, endpoint_id, tenant)
    object_id = new_id("resp" if body.event_type.startswith("response.") else "batch")
    payload = event_body(new_id("evt"), body.event_type, object_id, int(utc_now().timestamp()))
    allowed = AllowedHosts.parse(runtime.settings.outbound_allowed_hosts)
    try:
        with runtime.webhook_tests.hold(tenant):
            answer = await send(
                runtime.sealer,
                row,
                new_id("wh"),
                payload,
                allowed=allowed,
                timeout_s=runtime.settings.webhook_timeout_s,
            )
    except OutboundRefused as refused:
        raise InvalidRequest(f"The test event was not sent: {refused}", param="url", code="invalid_url") from None
    except OutboundFailed as failed:
        raise InvalidRequest(
            f"The test event got no answer from the endpoint: {failed}", code="webhook_endpoint_unreachable"
        ) from None
    return WebhookEndpointTestResult(
        webhook_endpoint_id=endpoint_id, event_type=body.event_type, status_code=answer.status_code
    )


async def list_deliveries(database: Database, endpoint_id: str, tenant: str, page: PageRequest) -> WebhookDeliveryList:
    async with database.read() as session:
        await _owned(session, endpoint_id, tenant)
        rows, has_more = await page_after(
            page,
            partial(repository.get_delivery, session, endpoint_id=endpoint_id),
            lambda after: repository.page_deliveries(
                session, endpoint_id, limit=page.limit, order=page.order, after=after
            ),
            unknown_after=lambda after: f"Invalid 'after': no delivery '{after}' of endpoint '{endpoint_id}'.",
        )
    return cursor_page(WebhookDeliveryList, [_delivery(row) for row in rows], has_more)
