"""POST /v1/embeddings. Thin: parse, call one service function, reply."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api.deps import RuntimeDep, WorkingTenantDep
from app.api.openapi import errors, json_body
from app.embeddings import service
from app.embeddings.schemas import CreateEmbeddingRequest, CreateEmbeddingResponse
from app.schemas.parsing import parse_body

router = APIRouter()


@router.post("/embeddings", openapi_extra=json_body(CreateEmbeddingRequest), responses=errors(503))
async def create_embeddings(request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep) -> CreateEmbeddingResponse:
    body = parse_body(await request.body(), CreateEmbeddingRequest, runtime.settings)
    return await service.create_embeddings(runtime, body)
