"""/v1/batches: create, list, retrieve, cancel. Thin: parse, call one service function, reply."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api.deps import RuntimeDep, TenantDep
from app.api.openapi import errors, json_body
from app.api.paging import NewestFirstPageDep
from app.batches import service
from app.batches.schemas import BatchList, BatchObject, CreateBatchRequest
from app.schemas.parsing import parse_body

router = APIRouter()


# 404: the input file.
@router.post("/batches", openapi_extra=json_body(CreateBatchRequest), responses=errors(404))
async def create_batch(request: Request, runtime: RuntimeDep, tenant: TenantDep) -> BatchObject:
    body = parse_body(await request.body(), CreateBatchRequest, runtime.settings)
    return await service.create_batch(runtime, tenant, body)


@router.get("/batches", responses=errors(400))
async def list_batches(runtime: RuntimeDep, tenant: TenantDep, page: NewestFirstPageDep) -> BatchList:
    return await service.list_batches(runtime.database, tenant, page)


@router.get("/batches/{batch_id}", responses=errors(404))
async def get_batch(batch_id: str, runtime: RuntimeDep, tenant: TenantDep) -> BatchObject:
    return await service.get_batch(runtime.database, batch_id, tenant)


@router.post("/batches/{batch_id}/cancel", responses=errors(404))
async def cancel_batch(batch_id: str, runtime: RuntimeDep, tenant: TenantDep) -> BatchObject:
    return await service.cancel_batch(runtime.database, batch_id, tenant)
