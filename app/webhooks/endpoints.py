"""/v1/webhook_endpoints and /v1/webhook_event_types: parse, call one service function, reply."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.deps import RuntimeDep, TenantDep
from app.api.openapi import errors, json_body
from app.api.paging import PageDep
from app.idempotency.answers import create_once
from app.idempotency.header import keyed_request, with_key_header
from app.schemas.parsing import parse_body
from app.webhooks import service
from app.webhooks.schemas import (
    DeletedWebhookEndpoint,
    RotateSecretRequest,
    TestRequest,
    WebhookDeliveryList,
    WebhookEndpointCreateRequest,
    WebhookEndpointList,
    WebhookEndpointObject,
    WebhookEndpointTestResult,
    WebhookEndpointUpdateRequest,
    WebhookEndpointWithSecret,
    WebhookEventTypeList,
)

router = APIRouter()


@router.post(
    "/webhook_endpoints",
    response_model=WebhookEndpointWithSecret,
    openapi_extra=with_key_header(json_body(WebhookEndpointCreateRequest)),
    responses=errors(409),
)
async def create_webhook_endpoint(
    request: Request, runtime: RuntimeDep, tenant: TenantDep
) -> WebhookEndpointWithSecret | Response:
    raw = await request.body()
    body = parse_body(raw, WebhookEndpointCreateRequest, runtime.settings)
    create = partial(service.create_endpoint, runtime, tenant, body)
    return await create_once(runtime, tenant, keyed_request(request, raw), create)


@router.get("/webhook_endpoints")
async def list_webhook_endpoints(runtime: RuntimeDep, tenant: TenantDep, page: PageDep) -> WebhookEndpointList:
    return await service.list_endpoints(runtime.database, tenant, page)


@router.get("/webhook_endpoints/{webhook_endpoint_id}", responses=errors(404))
async def get_webhook_endpoint(
    webhook_endpoint_id: str, runtime: RuntimeDep, tenant: TenantDep
) -> WebhookEndpointObject:
    return await service.get_endpoint(runtime.database, webhook_endpoint_id, tenant)


@router.post(
    "/webhook_endpoints/{webhook_endpoint_id}",
    openapi_extra=json_body(WebhookEndpointUpdateRequest, required=False),
    responses=errors(404),
)
async def update_webhook_endpoint(
    webhook_endpoint_id: str, request: Request, runtime: RuntimeDep, tenant: TenantDep
) -> WebhookEndpointObject:
    body = parse_body(await request.body() or b"{}", WebhookEndpointUpdateRequest, runtime.settings)
    return await service.update_endpoint(runtime, webhook_endpoint_id, tenant, body)


@router.delete("/webhook_endpoints/{webhook_endpoint_id}", responses=errors(404))
async def delete_webhook_endpoint(
    webhook_endpoint_id: str, runtime: RuntimeDep, tenant: TenantDep
) -> DeletedWebhookEndpoint:
    return await service.delete_endpoint(runtime.database, webhook_endpoint_id, tenant)


@router.post(
    "/webhook_endpoints/{webhook_endpoint_id}/rotate_secret",
    openapi_extra=json_body(RotateSecretRequest, required=False),
    responses=errors(404),
)
async def rotate_webhook_secret(
    webhook_endpoint_id: str, request: Request, runtime: RuntimeDep, tenant: TenantDep
) -> WebhookEndpointWithSecret:
    body = parse_body(await request.body() or b"{}", RotateSecretRequest, runtime.settings)
    return await service.rotate_secret(runtime, webhook_endpoint_id, tenant, body)


@router.post(
    "/webhook_endpoints/{webhook_endpoint_id}/test", openapi_extra=json_body(TestRequest), responses=errors(404)
)
async def test_webhook_endpoint(
    webhook_endpoint_id: str, request: Request, runtime: RuntimeDep, tenant: TenantDep
) -> WebhookEndpointTestResult:
    body = parse_body(await request.body(), TestRequest, runtime.settings)
    return await service.send_test_event(runtime, webhook_endpoint_id, tenant, body)


@router.get("/webhook_endpoints/{webhook_endpoint_id}/deliveries", responses=errors(404))
async def list_webhook_deliveries(
    webhook_endpoint_id: str, runtime: RuntimeDep, tenant: TenantDep, page: PageDep
) -> WebhookDeliveryList:
    """NOTE: our extension: the deliveries of the endpoint's events, newest first, with their attempts."""
    return await service.list_deliveries(runtime.database, webhook_endpoint_id, tenant, page)


@router.get("/webhook_event_types")
async def list_webhook_event_types(tenant: TenantDep) -> WebhookEventTypeList:
    return WebhookEventTypeList()
