"""/v1/batches: create, list, retrieve, cancel. Thin: parse, call one service function, reply."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.deps import RuntimeDep, TenantDep
from app.api.openapi import errors, json_body
from app.api.paging import NewestFirstPageDep
from app.batches import service
from app.batches.schemas import BatchList, BatchObject, CreateBatchRequest
from app.idempotency.answers import create_once
from app.idempotency.header import keyed_request, with_key_header
from app.schemas.parsing import parse_body

router = APIRouter()


# 404: the input file.
@router.post(
    "/batches",
    response_model=BatchObject,
    openapi_extra=with_key_header(json_body(CreateBatchRequest)),
    responses=errors(404, 409),
)
async def create_batch(request: Request, runtime: RuntimeDep, tenant: TenantDep) -> BatchObject | Response:
    raw = await request.body()
    body = parse_body(raw, CreateBatchRequest, runtime.settings)
    return await create_once(
        runtime, tenant, keyed_request(request, raw), partial(service.create_batch, runtime, tenant, body)
    )


@router.get("/batches", responses=errors(400))
async def list_batches(runtime: RuntimeDep, tenant: TenantDep, page: NewestFirstPageDep) -> BatchList:
    return await service.list_batches(runtime.database, tenant, page)


@router.get("/batches/{batch_id}", responses=errors(404))
async def get_batch(batch_id: str, runtime: RuntimeDep, tenant: TenantDep) -> BatchObject:
    return await service.get_batch(runtime.database, batch_id, tenant)


@router.post("/batches/{batch_id}/cancel", responses=errors(404))
async def cancel_batch(batch_id: str, runtime: RuntimeDep, tenant: TenantDep) -> BatchObject:
    return await service.cancel_batch(runtime.database, batch_id, tenant)
