"""The event types this server sends (named as the SDK's WebhookCreateParams names them)."""

from __future__ import annotations

#: Sent when a background response (`background: true`) ends, one for each terminal status.
RESPONSE_EVENT_TYPES = ("response.completed", "response.failed", "response.cancelled", "response.incomplete")
#: Sent when a batch ends (by the batches package, through app/webhooks/outbox.record_event).
BATCH_EVENT_TYPES = ("batch.completed", "batch.failed", "batch.expired", "batch.cancelled")
EVENT_TYPES = (*RESPONSE_EVENT_TYPES, *BATCH_EVENT_TYPES)


def response_event_type(status: str) -> str | None:
    """The event a background response that ended as `status` sends (None for a status that is not terminal)."""
    event_type = f"response.{status}"
    return event_type if event_type in RESPONSE_EVENT_TYPES else None
