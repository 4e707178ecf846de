"""/v1/responses: create (JSON or SSE), retrieve (or replay), delete, cancel, list (an extension), input items,
input token counts and compact (WebSocket mode is app/sessions/). Thin: parse, call one service function, reply."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.api.deps import (
    CallerDep,
    IncludeBracketsQuery,
    IncludeQuery,
    IncludesDep,
    RuntimeDep,
    TenantDep,
    WorkingTenantDep,
    includes_of,
)
from app.api.disconnect import unless_client_leaves
from app.api.openapi import errors, json_body
from app.api.paging import PageDep
from app.api.sse import EventStreamResponse
from app.idempotency.header import keyed_request, with_key_header
from app.responses import cancellation, keyed_creates, reads, service, submission
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
from app.schemas.parsing import parse_body
from app.schemas.responses import ResponseObject, ResponseStatus

router = APIRouter()
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
    response_model=ResponseList,
    responses=errors(400),
    summary="List stored responses (extension)",
    description="Not in the hosted API: the caller's stored responses, newest first, filtered, in cursor pages.",
    openapi_extra={"parameters": [METADATA_QUERY]},
)
async def get_responses(
    request: Request,
    caller: CallerDep,
    page: PageDep,
    status: ResponseStatus | None = None,
    model: str | None = None,
    previous_response_id: str | None = None,
    created_after: Annotated[int | None, Query(ge=0, le=MAX_CREATED_AT)] = None,
    created_before: Annotated[int | None, Query(ge=0, le=MAX_CREATED_AT)] = None,
) -> Response:
    filters = ResponseFilters(
        status=status,
        model=model,
        previous_response_id=previous_response_id,
        metadata=_metadata_filters(request),
        created_after=created_after,
        created_before=created_before,
    )
    # Returned as the model, FastAPI validated the whole page again; each finished response's JSON is cached.
    runtime = caller.runtime
    body = await reads.list_responses_json(runtime.database, runtime.read_cache, caller.tenant, filters, page)
    return Response(body, media_type="application/json")


@router.post(
    "/responses",
    response_model=None,
    openapi_extra=with_key_header(json_body(CreateResponseRequest)),
    # 404: the conversation it names; 409: its Idempotency-Key; 500: a generation that ended without any result.
    responses={**RESPONSE_OR_EVENTS, **errors(404, 409, 500)},
)
async def create_response(request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep) -> Response:
    raw = await request.body()
    body = parse_create_request(raw, runtime.settings)
    keyed = keyed_request(request, raw)
    if keyed is not None:  # run once for the key, and answered again to a retry with it (docs/using/idempotency.md)
        return await keyed_creates.create_keyed(body, keyed, tenant, runtime)
    prepared = await service.prepare(body, tenant, runtime)
    headers = submission.answer_headers(prepared)
    if prepared.stream:
        return EventStreamResponse(await submission.open_stream(runtime, prepared, tenant), headers=headers)
    response = await unless_client_leaves(request, submission.create_response(runtime, prepared, tenant))
    return Response(response.model_dump_json(), media_type="application/json", headers=headers)


# NOTE: the hot read: one dependency (the caller) and its query parameters read by FastAPI as the route's own;
# the parameters' order is the OpenAPI document's (path, stream, starting_after, include, include[]).
@router.get("/responses/{response_id}", response_model=None, responses={**RESPONSE_OR_EVENTS, **errors(404)})
async def get_response(
    response_id: str,
    caller: CallerDep,
    stream: bool = False,
    # Sequence numbers are 32-bit integers in every database; a larger cursor is a 400, checked before the 200.
    starting_after: Annotated[int | None, Query(ge=-1, le=MAX_SEQUENCE_NUMBER)] = None,
    include: IncludeQuery = None,
    include_brackets: IncludeBracketsQuery = None,
) -> Response:
    runtime, tenant = caller.runtime, caller.tenant
    includes = includes_of(include, include_brackets)
    if stream:
        return EventStreamResponse(await reads.stream_stored_response(runtime, response_id, tenant, starting_after))
    # One pydantic dump to JSON (FastAPI's generic encoder took twice as long), or none: a finished response's
    # JSON is cached while its stored updated_at is unchanged.
    body = await reads.read_response_json(runtime.database, runtime.read_cache, response_id, tenant, includes)
    return Response(body, media_type="application/json")


@router.delete("/responses/{response_id}", responses=errors(404))
async def delete_response(response_id: str, runtime: RuntimeDep, tenant: TenantDep) -> DeletedResponse:
    stop_running = partial(cancellation.stop_response, runtime)
    return await reads.delete_response(
        runtime.database, response_id, tenant, stop_running=stop_running, cache=runtime.read_cache
    )


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
