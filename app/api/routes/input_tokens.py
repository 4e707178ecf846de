"""POST /v1/responses/input_tokens: count a request's input tokens without generating anything."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api.deps import RuntimeDep, TenantDep
from app.api.openapi import errors, json_body
from app.schemas.requests import COUNT_FIELDS, CreateResponseRequest
from app.schemas.responses import InputTokenCount
from app.services.input_tokens import count_input_tokens
from app.services.validation import parse_count_request

router = APIRouter()


# The body: create's fields that shape the prompt, none required. 404: the conversation it names.
@router.post(
    "/responses/input_tokens",
    openapi_extra=json_body(CreateResponseRequest, fields=COUNT_FIELDS),
    responses=errors(404),
)
async def count_tokens(request: Request, runtime: RuntimeDep, tenant: TenantDep) -> InputTokenCount:
    body = parse_count_request(await request.body(), runtime.settings)
    return await count_input_tokens(body, tenant, runtime)
