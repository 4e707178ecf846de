"""POST /v1/responses/compact: parse, call the compaction service, reply."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api.deps import RuntimeDep, TenantDep
from app.schemas.compaction import KNOWN_COMPACT_FIELDS, CompactedResponse, CompactRequest
from app.services.compaction import compact
from app.services.validation import parse_body

router = APIRouter()


@router.post("/responses/compact")
async def compact_response(request: Request, runtime: RuntimeDep, tenant: TenantDep) -> CompactedResponse:
    body = parse_body(await request.body(), CompactRequest, runtime.settings, known=KNOWN_COMPACT_FIELDS)
    return await compact(runtime, body, tenant)
