"""/v1/responses: create (JSON or SSE), retrieve (or replay), delete, cancel, list (an extension), input items,
input token counts, compact, and WebSocket mode. Thin: parse, call one service function, reply."""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from functools import partial
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Query, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from starlette.websockets import WebSocketDisconnect

from app.api.deps import IncludesDep, RuntimeDep, TenantDep, WorkingTenantDep
from app.api.disconnect import unless_client_leaves
from app.api.openapi import errors, json_body
from app.api.paging import PageDep
from app.api.sse import EventStreamResponse
from app.errors import ApiError, Unauthorized
from app.observability.metrics import WEBSOCKET_CONNECTIONS
from app.responses import cancellation, reads, service, submission
from app.responses.compaction import compact
from app.responses.parsing import parse_count_request, parse_create_request
from app.responses.schemas import (
    COUNT_FIELDS,
    KNOWN_COMPACT_FIELDS,
    CompactedResponse,
    CompactRequest,
    CreateResponseRequest,
    DeletedResponse,
    InputItemList,
    InputTokenCount,
    ResponseFilters,
    ResponseList,
)
from app.responses.socket_session import EventRefused, IdleClock, ResponsesSocketSession, SocketCreate
from app.runtime import Runtime
from app.schemas.parsing import parse_body
from app.schemas.responses import ResponseObject, ResponseStatus
from app.tenants.identity import PROJECT_HEADER

router = APIRouter()
IGNORED_TOOLS_HEADER = "x-llama-responses-ignored-tools"
MAX_SEQUENCE_NUMBER = 2**31 - 1
#: 9999-12-31T23:59:59Z, the last second a datetime holds: a later bound is a 400, not a 500 from the conversion.
MAX_CREATED_AT = 253402300799
#: A Response as JSON, or (stream: true) its events as server-sent events.
RESPONSE_OR_EVENTS: dict[int | str, dict[str, Any]] = {
    200: {
        "model": ResponseObject,
        "description": "The Response; with `stream: true`, its events as server-sent events.",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}
METADATA_PARAM = "metadata["
#: metadata[key]=value is read from the raw query (any key): described here for the OpenAPI document.
METADATA_QUERY = {
    "name": "metadata",
    "in": "query",
    "required": False,
    "style": "deepObject",
    "explode": True,
    "description": "metadata[KEY]=VALUE: responses whose metadata has KEY set to VALUE (all pairs must match).",
    "schema": {"type": "object", "additionalProperties": {"type": "string"}},
}
#: Close code for a refused upgrade where the server cannot answer it with an HTTP status (policy violation).
POLICY_VIOLATION = 1008
NORMAL_CLOSURE = 1000
DENIAL_EXTENSION = "websocket.http.response"


# 500: the model could not write the summary.
@router.post("/responses/compact", openapi_extra=json_body(CompactRequest), responses=errors(500))
async def compact_response(request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep) -> CompactedResponse:
    body = parse_body(await request.body(), CompactRequest, runtime.settings, known=KNOWN_COMPACT_FIELDS)
    return await unless_client_leaves(request, compact(runtime, body, tenant))


# The body: create's fields that shape the prompt, none required. 404: the conversation it names.
@router.post(
    "/responses/input_tokens",
    openapi_extra=json_body(CreateResponseRequest, fields=COUNT_FIELDS),
    responses=errors(404),
)
async def count_tokens(request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep) -> InputTokenCount:
    body = parse_count_request(await request.body(), runtime.settings)
    return await service.count_input_tokens(body, tenant, runtime)


def _metadata_filters(request: Request) -> dict[str, str]:
    """metadata[key]=value query parameters (as the SDK writes a dict in a query), key -> value."""
    return {
        name[len(METADATA_PARAM) : -1]: value
        for name, value in request.query_params.multi_items()
        if name.startswith(METADATA_PARAM) and name.endswith("]") and len(name) > len(METADATA_PARAM) + 1
    }


@router.get(
    "/responses",
    responses=errors(400),
    summary="List stored responses (extension)",
    description="Not in the hosted API: the caller's stored responses, newest first, filtered, in cursor pages.",
    openapi_extra={"parameters": [METADATA_QUERY]},
)
async def get_responses(
    request: Request,
    runtime: RuntimeDep,
    tenant: TenantDep,
    page: PageDep,
    status: ResponseStatus | None = None,
    model: str | None = None,
    previous_response_id: str | None = None,
    created_after: Annotated[int | None, Query(ge=0, le=MAX_CREATED_AT)] = None,
    created_before: Annotated[int | None, Query(ge=0, le=MAX_CREATED_AT)] = None,
) -> ResponseList:
    filters = ResponseFilters(
        status=status,
        model=model,
        previous_response_id=previous_response_id,
        metadata=_metadata_filters(request),
        created_after=created_after,
        created_before=created_before,
    )
    return await reads.list_responses(runtime.database, tenant, filters, page)


@router.post(
    "/responses",
    response_model=None,
    openapi_extra=json_body(CreateResponseRequest),
    # 404: the conversation it names; 500: a generation that ended without any result.
    responses={**RESPONSE_OR_EVENTS, **errors(404, 500)},
)
async def create_response(request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep) -> Response:
    body = parse_create_request(await request.body(), runtime.settings)
    prepared = await service.prepare(body, tenant, runtime)
    # Hosted tools (web_search, ...) cannot run here; they were left out of what the model sees.
    headers = {IGNORED_TOOLS_HEADER: ", ".join(prepared.ignored_tools)} if prepared.ignored_tools else {}
    if prepared.stream:
        return EventStreamResponse(await submission.open_stream(runtime, prepared, tenant), headers=headers)
    response = await unless_client_leaves(request, submission.create_response(runtime, prepared, tenant))
    return Response(response.model_dump_json(), media_type="application/json", headers=headers)


@router.get("/responses/{response_id}", response_model=None, responses={**RESPONSE_OR_EVENTS, **errors(404)})
async def get_response(
    response_id: str,
    runtime: RuntimeDep,
    tenant: TenantDep,
    includes: IncludesDep,
    stream: bool = False,
    # Sequence numbers are 32-bit integers in every database; a larger cursor is a 400, checked before the 200.
    starting_after: Annotated[int | None, Query(ge=-1, le=MAX_SEQUENCE_NUMBER)] = None,
) -> Response:
    if stream:
        return EventStreamResponse(await reads.stream_stored_response(runtime, response_id, tenant, starting_after))
    response = await reads.read_response(runtime.database, response_id, tenant, includes)
    # One pydantic dump to JSON, as the create route answers: FastAPI's generic encoder took twice as long.
    return Response(response.model_dump_json(), media_type="application/json")


@router.delete("/responses/{response_id}", responses=errors(404))
async def delete_response(response_id: str, runtime: RuntimeDep, tenant: TenantDep) -> DeletedResponse:
    stop_running = partial(cancellation.stop_response, runtime)
    return await reads.delete_response(runtime.database, response_id, tenant, stop_running=stop_running)


@router.post("/responses/{response_id}/cancel", responses=errors(404))
async def cancel_response(response_id: str, runtime: RuntimeDep, tenant: TenantDep) -> ResponseObject:
    return await cancellation.cancel_response(runtime, response_id, tenant)


@router.get("/responses/{response_id}/input_items", responses=errors(404))
async def get_input_items(
    response_id: str,
    runtime: RuntimeDep,
    tenant: TenantDep,
    includes: IncludesDep,
    page: PageDep,
) -> InputItemList:
    return await reads.list_input_items(runtime.database, response_id, tenant, page, includes=includes)


# WebSocket mode (the SDK's `client.responses.connect()`): authenticate the upgrade, then answer each message the
# server does not take at once, and relay the responses of the others in order, while listening for the client
# going away.


async def _refuse(websocket: WebSocket, error: ApiError) -> None:
    """The same 401 as HTTP where the server can send one on an upgrade; else a policy-violation close."""
    if DENIAL_EXTENSION in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(
            JSONResponse(error.body(), status_code=error.status_code, headers=error.headers or None)
        )
    else:
        await websocket.close(code=POLICY_VIOLATION, reason=error.message[:120])


@router.websocket("/responses")
async def responses_socket(websocket: WebSocket) -> None:
    runtime: Runtime = websocket.app.state.runtime
    try:
        identity = await runtime.authenticator.identify(
            websocket.headers.get("authorization", ""), websocket.headers.get(PROJECT_HEADER)
        )
        identity.require_write()  # every message on the socket is a create
        tenant = identity.tenant
        # Connections are counted apart from requests: an open one takes one of its tenant's request slots only
        # while a response runs on it (below), so idle connections never lock the tenant's requests out.
        runtime.sockets.acquire(tenant)
    except ApiError as error:
        await _refuse(websocket, error)
        return
    try:
        await _serve(websocket, runtime, tenant)
    finally:
        runtime.sockets.release(tenant)


async def _serve(websocket: WebSocket, runtime: Runtime, tenant: str) -> None:
    await websocket.accept()
    WEBSOCKET_CONNECTIONS.inc()
    settings = runtime.settings
    session = ResponsesSocketSession(runtime, tenant)
    # Bounded: once full, the reader waits for room and the client's sends wait on TCP (backpressure).
    creates: asyncio.Queue[SocketCreate] = asyncio.Queue(maxsize=settings.websocket_max_queued)
    # The reader answers refused events while a response's events go out: one frame at a time.
    sending = anyio.Lock()
    idle = IdleClock(settings.websocket_idle_timeout_s)
    authorization = websocket.headers.get("authorization", "")

    async def send(event: dict[str, Any]) -> bool:
        """Send one event; False when the client has gone (Starlette raises RuntimeError once it saw the close)."""
        try:
            async with sending:
                await websocket.send_text(json.dumps(event, separators=(",", ":")))
        except (WebSocketDisconnect, RuntimeError):
            return False
        return True

    async def read(cancel: anyio.CancelScope) -> None:
        # Each message is checked as it comes: one the server does not take is answered at once, even while a
        # response runs; a create waits for the ones before it. A client that goes away cancels the one
        # running, whose relay then cancels its generation. One that sits idle is closed.
        try:
            while True:
                with anyio.move_on_after(idle.left(waiting=not creates.empty())) as wait:
                    message = await websocket.receive()
                if wait.cancelled_caught:
                    if idle.expired(waiting=not creates.empty()):
                        await websocket.close(code=NORMAL_CLOSURE, reason=f"idle for {idle.timeout_s:g} s")
                        break
                    continue
                idle.touch()
                if message["type"] == "websocket.disconnect":
                    break
                try:
                    # A key revoked since the upgrade is refused here too (as soon as this node's cache knows).
                    await runtime.authenticator.identify(authorization)
                except Unauthorized as error:
                    await send({"type": "error", "status": error.status_code, **error.body()})
                    await websocket.close(code=POLICY_VIOLATION, reason=error.message[:120])
                    break
                data = message.get("text")
                try:
                    await creates.put(session.admit(data if data is not None else message.get("bytes") or b""))
                except EventRefused as refused:
                    if not await send(refused.event):
                        break
        except WebSocketDisconnect:
            pass
        cancel.cancel()

    async def respond(create: SocketCreate) -> bool:
        """Run one create, holding one of the tenant's request slots while it runs; False once the client left."""
        try:
            runtime.slots.acquire(tenant, (await runtime.policy.limits_of(tenant)).max_concurrent_requests)
        except ApiError as error:  # the tenant's requests hold every slot (or its limits are unreadable): refused
            return await send(session.refuse(create, error))
        try:
            with idle.busy():
                async with aclosing(session.run(create)) as events:
                    async for event in events:
                        if not await send(event):
                            return False
        finally:
            runtime.slots.release(tenant)
        return True

    async with anyio.create_task_group() as group:
        group.start_soon(read, group.cancel_scope)
        while await respond(await creates.get()):
            pass
        group.cancel_scope.cancel()
