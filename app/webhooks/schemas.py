"""Webhook endpoints on the wire, named and shaped as the openai SDK's `openai.types.webhooks` (WebhookEndpoint,
WebhookEndpointWithSecret, DeletedWebhookEndpoint, WebhookEndpointTestResult, WebhookEventTypeList), and the
deliveries list, our extension."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.webhooks.event_types import EVENT_TYPES

EventType = Literal[
    "response.completed",
    "response.failed",
    "response.cancelled",
    "response.incomplete",
    "batch.completed",
    "batch.failed",
    "batch.expired",
    "batch.cancelled",
]
MAX_NAME_CHARS = 256
MAX_URL_CHARS = 2048


def _distinct(types: list[EventType]) -> list[EventType]:
    if not types:
        raise ValueError("at least one event type is required.")
    return list(dict.fromkeys(types))


class WebhookEndpointCreateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    event_types: list[EventType]
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    url: str = Field(min_length=1, max_length=MAX_URL_CHARS)

    _event_types = field_validator("event_types")(_distinct)


class WebhookEndpointUpdateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    event_types: list[EventType] | None = None
    name: str | None = Field(None, min_length=1, max_length=MAX_NAME_CHARS)
    url: str | None = Field(None, min_length=1, max_length=MAX_URL_CHARS)
    #: NOTE: our extension: `enabled` turns a disabled endpoint back on (the hosted API has no such field).
    status: Literal["enabled", "disabled"] | None = None

    @field_validator("event_types")
    @classmethod
    def _event_types(cls, value: list[EventType] | None) -> list[EventType] | None:
        return None if value is None else _distinct(value)


class RotateSecretRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    keep_old_secret_active_for_24_hours: bool = False


class TestRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    event_type: EventType


class WebhookEndpointObject(BaseModel):
    id: str
    object: Literal["webhook_endpoint"] = "webhook_endpoint"
    created_at: int
    updated_at: int | None = None
    event_types: list[str]
    name: str
    url: str
    signing_secret_hint: str | None = None
    #: NOTE: our extension: `disabled` once deliveries failed for the whole retry window (hosted keeps it internal).
    status: Literal["enabled", "disabled"] = "enabled"


class WebhookEndpointWithSecret(WebhookEndpointObject):
    """Only from create and rotate_secret: the one time the secret is shown."""

    signing_secret: str


class WebhookEndpointList(BaseModel):
    object: Literal["list"] = "list"
    data: list[WebhookEndpointObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class DeletedWebhookEndpoint(BaseModel):
    id: str
    object: Literal["webhook_endpoint.deleted"] = "webhook_endpoint.deleted"
    deleted: bool = True


class WebhookEndpointTestResult(BaseModel):
    object: Literal["webhook_endpoint.test"] = "webhook_endpoint.test"
    webhook_endpoint_id: str
    event_type: str
    status_code: int
    success: Literal[True] = True


class WebhookEventTypeList(BaseModel):
    object: Literal["list"] = "list"
    data: list[str] = Field(default_factory=lambda: list(EVENT_TYPES))


class WebhookDelivery(BaseModel):
    """NOTE: our extension (GET /v1/webhook_endpoints/{id}/deliveries): one event sent to one endpoint."""

    id: str
    object: Literal["webhook_endpoint.delivery"] = "webhook_endpoint.delivery"
    webhook_endpoint_id: str
    event_id: str
    event_type: str
    data: dict[str, str]
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    created_at: int
    last_attempt_at: int | None = None
    next_attempt_at: int | None = None
    delivered_at: int | None = None
    last_status_code: int | None = None
    #: Why the last attempt failed, in our words (the receiver's status and its standard phrase, or no answer):
    #: what a receiver answers is never shown back.
    last_error: str | None = None


class WebhookDeliveryList(BaseModel):
    object: Literal["list"] = "list"
    data: list[WebhookDelivery]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False
