"""POST/GET/DELETE /v1/responses and cancel: parse, call one service function, reply as JSON or SSE."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.api.deps import IncludesDep, RuntimeDep, TenantDep
from app.api.openapi import errors, json_body
from app.api.sse import EventStreamResponse
from app.schemas.requests import CreateResponseRequest
from app.schemas.responses import DeletedResponse, ResponseObject
from app.services import cancellation, preparation, submission
from app.services import responses as service
from app.services.validation import parse_create_request

router = APIRouter()
IGNORED_TOOLS_HEADER = "x-llama-responses-ignored-tools"
MAX_SEQUENCE_NUMBER = 2**31 - 1
#: A Response as JSON, or (stream: true) its events as server-sent events.
RESPONSE_OR_EVENTS: dict[int | str, dict[str, Any]] = {
    200: {
        "model": ResponseObject,
        "description": "The Response; with `stream: true`, its events as server-sent events.",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


@router.post(
    "/responses",
    response_model=None,
    openapi_extra=json_body(CreateResponseRequest),
    # 404: the conversation it names; 500: a generation that ended without any result.
    responses={**RESPONSE_OR_EVENTS, **errors(404, 500)},
)
async def create_response(request: Request, runtime: RuntimeDep, tenant: TenantDep) -> Response:
    body = parse_create_request(await request.body(), runtime.settings)
    prepared = await preparation.prepare_response(body, tenant, runtime)
    # Hosted tools (web_search, ...) cannot run here; they were left out of what the model sees.
    headers = {IGNORED_TOOLS_HEADER: ", ".join(prepared.ignored_tools)} if prepared.ignored_tools else {}
    if prepared.stream:
        return EventStreamResponse(await submission.open_stream(runtime, prepared, tenant), headers=headers)
    response = await submission.create_response(runtime, prepared, tenant)
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
        return EventStreamResponse(await service.stream_stored_response(runtime, response_id, tenant, starting_after))
    response = await service.read_response(runtime, response_id, tenant, includes)
    # One pydantic dump to JSON, as the create route answers: FastAPI's generic encoder took twice as long.
    return Response(response.model_dump_json(), media_type="application/json")


@router.delete("/responses/{response_id}", responses=errors(404))
async def delete_response(response_id: str, runtime: RuntimeDep, tenant: TenantDep) -> DeletedResponse:
    stop_running = partial(cancellation.stop_response, runtime)
    return await service.delete_response(runtime.sessionmaker, response_id, tenant, stop_running=stop_running)


@router.post("/responses/{response_id}/cancel", responses=errors(404))
async def cancel_response(response_id: str, runtime: RuntimeDep, tenant: TenantDep) -> ResponseObject:
    return await cancellation.cancel_response(runtime, response_id, tenant)
