"""The outbox: an event is written in the transaction that ends its object (a response's final state, a batch's),
as one delivery to each of the tenant's enabled endpoints subscribed to its type, so that it is sent if and only
if that end was committed, whichever process then delivers it (app/webhooks/delivery.py)."""

from __future__ import annotations

import json

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import utc_now
from app.db.models import WebhookDeliveryRow
from app.ids import new_id
from app.webhooks import repository
from app.webhooks.event_types import EVENT_TYPES, response_event_type


def event_body(event_id: str, event_type: str, object_id: str, created_at: int) -> str:
    """The body every attempt sends and signs, as the SDK's *WebhookEvent types read it."""
    event = {"id": event_id, "object": "event", "created_at": created_at, "type": event_type, "data": {"id": object_id}}
    return json.dumps(event, separators=(",", ":"))


async def record_event(session: AsyncSession, *, tenant: str, event_type: str, object_id: str) -> list[str]:
    """Write `event_type` about `object_id` for delivery, in the caller's unit of work (the one that commits the
    object's end): the ids (`webhook-id`s) of the deliveries written, none when no endpoint takes the type."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown webhook event type {event_type!r}")
    endpoint_ids = await repository.subscribed_endpoints(session, tenant, event_type)
    if not endpoint_ids:
        return []
    now = utc_now()
    event_id = new_id("evt")
    body = event_body(event_id, event_type, object_id, int(now.timestamp()))
    rows = [
        WebhookDeliveryRow(
            id=new_id("wh"),
            endpoint_id=endpoint_id,
            tenant=tenant,
            event_id=event_id,
            event_type=event_type,
            object_id=object_id,
            body=body,
            status="pending",
            next_attempt_at=now,
            attempts=0,
            created_at=now,
        )
        for endpoint_id in endpoint_ids
    ]
    await repository.insert_deliveries(session, rows)
    return [row.id for row in rows]


async def record_response_end(
    session: AsyncSession, *, tenant: str, response_id: str, status: str, background: bool
) -> list[str]:
    """A response reached `status` in this unit of work: its event, when it ran in the background (as hosted, a
    foreground response sends none: its client has the answer)."""
    event_type = response_event_type(status)
    if not background or event_type is None:
        return []
    return await record_event(session, tenant=tenant, event_type=event_type, object_id=response_id)
