"""POST /v1/responses/compact: parse, call the compaction service, reply."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api.deps import RuntimeDep, TenantDep
from app.api.openapi import errors, json_body
from app.schemas.compaction import KNOWN_COMPACT_FIELDS, CompactedResponse, CompactRequest
from app.services.compaction import compact
from app.services.validation import parse_body

router = APIRouter()


# 500: the model could not write the summary.
@router.post("/responses/compact", openapi_extra=json_body(CompactRequest), responses=errors(500))
async def compact_response(request: Request, runtime: RuntimeDep, tenant: TenantDep) -> CompactedResponse:
    body = parse_body(await request.body(), CompactRequest, runtime.settings, known=KNOWN_COMPACT_FIELDS)
    return await compact(runtime, body, tenant)
