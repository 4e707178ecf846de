"""/v1/conversations and their items: parse, call one service function, reply."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.deps import IncludesDep, RuntimeDep, TenantDep, WorkingTenantDep
from app.api.openapi import errors, json_body
from app.api.paging import PageDep
from app.conversations import service
from app.conversations.schemas import (
    ConversationCreateRequest,
    ConversationItemList,
    ConversationObject,
    ConversationUpdateRequest,
    DeletedConversation,
    ItemsCreateRequest,
)
from app.idempotency.answers import create_once
from app.idempotency.header import keyed_request, with_key_header
from app.schemas.parsing import parse_body

router = APIRouter()


@router.post(
    "/conversations",
    response_model=ConversationObject,
    openapi_extra=with_key_header(json_body(ConversationCreateRequest, required=False)),
    responses=errors(409),
)
async def create_conversation(
    request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep
) -> ConversationObject | Response:
    # Every field is optional: an empty body is an empty conversation.
    raw = await request.body() or b"{}"
    body = parse_body(raw, ConversationCreateRequest, runtime.settings)
    create = partial(service.create_conversation, runtime, tenant, items=body.items, metadata=body.metadata)
    return await create_once(runtime, tenant, keyed_request(request, raw), create)


@router.get("/conversations/{conversation_id}", responses=errors(404))
async def get_conversation(conversation_id: str, runtime: RuntimeDep, tenant: TenantDep) -> ConversationObject:
    return await service.get_conversation(runtime.database, conversation_id, tenant)


@router.post(
    "/conversations/{conversation_id}", openapi_extra=json_body(ConversationUpdateRequest), responses=errors(404)
)
async def update_conversation(
    conversation_id: str, request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep
) -> ConversationObject:
    body = parse_body(await request.body(), ConversationUpdateRequest, runtime.settings)
    return await service.update_conversation(runtime.database, conversation_id, tenant, body.metadata)


@router.delete("/conversations/{conversation_id}", responses=errors(404))
async def delete_conversation(conversation_id: str, runtime: RuntimeDep, tenant: TenantDep) -> DeletedConversation:
    return await service.delete_conversation(runtime.database, conversation_id, tenant)


@router.post(
    "/conversations/{conversation_id}/items",
    response_model=ConversationItemList,
    openapi_extra=with_key_header(json_body(ItemsCreateRequest)),
    responses=errors(404, 409),
)
async def add_items(
    conversation_id: str,
    request: Request,
    runtime: RuntimeDep,
    tenant: WorkingTenantDep,
    includes: IncludesDep,
) -> ConversationItemList | Response:
    raw = await request.body()
    body = parse_body(raw, ItemsCreateRequest, runtime.settings)
    add = partial(service.add_items, runtime, conversation_id, tenant, body.items, includes=includes)
    return await create_once(runtime, tenant, keyed_request(request, raw), add)


@router.get("/conversations/{conversation_id}/items", responses=errors(404))
async def list_items(
    conversation_id: str,
    runtime: RuntimeDep,
    tenant: TenantDep,
    includes: IncludesDep,
    page: PageDep,
) -> ConversationItemList:
    return await service.list_items(runtime.database, conversation_id, tenant, page, includes=includes)


@router.get("/conversations/{conversation_id}/items/{item_id}", response_model=None, responses=errors(404))
async def get_item(
    conversation_id: str,
    item_id: str,
    runtime: RuntimeDep,
    tenant: TenantDep,
    includes: IncludesDep,
) -> Response:
    item = await service.get_item(runtime.database, conversation_id, item_id, tenant, includes=includes)
    return Response(item.model_dump_json(), media_type="application/json")


@router.delete("/conversations/{conversation_id}/items/{item_id}", responses=errors(404))
async def delete_item(conversation_id: str, item_id: str, runtime: RuntimeDep, tenant: TenantDep) -> ConversationObject:
    return await service.delete_item(runtime.database, conversation_id, item_id, tenant)
