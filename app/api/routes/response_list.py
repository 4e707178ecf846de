"""GET /v1/responses (an extension): the caller's stored responses, newest first, filtered, in cursor pages."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from app.api.deps import RuntimeDep, TenantDep
from app.api.openapi import errors
from app.api.paging import PageDep
from app.schemas.response_list import ResponseFilters, ResponseList
from app.schemas.responses import ResponseStatus
from app.services.response_list import read_responses

router = APIRouter()

#: 9999-12-31T23:59:59Z, the last second a datetime holds: a later bound is a 400, not a 500 from the conversion.
MAX_CREATED_AT = 253402300799

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
    return await read_responses(runtime, tenant, filters, page)
