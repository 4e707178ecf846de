"""/v1/vector_stores and its files, file batches and search. Thin: parse, call one service function, reply."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api.deps import RuntimeDep, TenantDep, WorkingTenantDep
from app.api.openapi import errors, json_body
from app.api.paging import PageDep
from app.schemas.parsing import parse_body, parse_json_object, parse_payload
from app.vector_stores import files_service, service
from app.vector_stores.schemas import (
    CreateFileBatchRequest,
    CreateVectorStoreRequest,
    FileContentPage,
    FileParam,
    SearchResultsPage,
    SearchVectorStoreRequest,
    UpdateFileRequest,
    UpdateVectorStoreRequest,
    VectorStoreDeleted,
    VectorStoreFileBatchObject,
    VectorStoreFileDeleted,
    VectorStoreFileList,
    VectorStoreFileObject,
    VectorStoreList,
    VectorStoreObject,
)

router = APIRouter()
STORE = "/vector_stores/{vector_store_id}"


@router.post("/vector_stores", openapi_extra=json_body(CreateVectorStoreRequest), responses=errors(404, 429))
async def create_vector_store(request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep) -> VectorStoreObject:
    body = parse_body(await request.body(), CreateVectorStoreRequest, runtime.settings)
    return await service.create_store(runtime, tenant, body)


@router.get("/vector_stores", responses=errors(400))
async def list_vector_stores(runtime: RuntimeDep, tenant: TenantDep, page: PageDep) -> VectorStoreList:
    return await service.list_stores(runtime, tenant, page)


@router.get(STORE, responses=errors(404))
async def get_vector_store(vector_store_id: str, runtime: RuntimeDep, tenant: TenantDep) -> VectorStoreObject:
    return await service.get_store(runtime, vector_store_id, tenant)


@router.post(STORE, openapi_extra=json_body(UpdateVectorStoreRequest), responses=errors(404, 429))
async def update_vector_store(
    vector_store_id: str, request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep
) -> VectorStoreObject:
    payload = parse_json_object(await request.body(), runtime.settings)
    body = parse_payload(payload, UpdateVectorStoreRequest, runtime.settings)
    return await service.update_store(runtime, vector_store_id, tenant, body, set(payload))


@router.delete(STORE, responses=errors(404))
async def delete_vector_store(vector_store_id: str, runtime: RuntimeDep, tenant: TenantDep) -> VectorStoreDeleted:
    return await service.delete_store(runtime, vector_store_id, tenant)


@router.post(f"{STORE}/search", openapi_extra=json_body(SearchVectorStoreRequest), responses=errors(404, 503))
async def search_vector_store(
    vector_store_id: str, request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep
) -> SearchResultsPage:
    body = parse_body(await request.body(), SearchVectorStoreRequest, runtime.settings)
    return await service.search_store(runtime, vector_store_id, tenant, body)


@router.post(f"{STORE}/files", openapi_extra=json_body(FileParam), responses=errors(404, 429))
async def create_vector_store_file(
    vector_store_id: str, request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep
) -> VectorStoreFileObject:
    body = parse_body(await request.body(), FileParam, runtime.settings)
    return await files_service.create_store_file(runtime, vector_store_id, tenant, body)


@router.get(f"{STORE}/files", responses=errors(400, 404))
async def list_vector_store_files(
    vector_store_id: str, runtime: RuntimeDep, tenant: TenantDep, page: PageDep, filter: str | None = None
) -> VectorStoreFileList:
    return await files_service.list_store_files(runtime, vector_store_id, tenant, page, filter)


@router.get(f"{STORE}/files/{{file_id}}", responses=errors(404))
async def get_vector_store_file(
    vector_store_id: str, file_id: str, runtime: RuntimeDep, tenant: TenantDep
) -> VectorStoreFileObject:
    return await files_service.get_store_file(runtime, vector_store_id, file_id, tenant)


@router.post(f"{STORE}/files/{{file_id}}", openapi_extra=json_body(UpdateFileRequest), responses=errors(404))
async def update_vector_store_file(
    vector_store_id: str, file_id: str, request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep
) -> VectorStoreFileObject:
    body = parse_body(await request.body(), UpdateFileRequest, runtime.settings)
    return await files_service.update_store_file(runtime, vector_store_id, file_id, tenant, body.attributes)


@router.delete(f"{STORE}/files/{{file_id}}", responses=errors(404))
async def delete_vector_store_file(
    vector_store_id: str, file_id: str, runtime: RuntimeDep, tenant: TenantDep
) -> VectorStoreFileDeleted:
    return await files_service.delete_store_file(runtime, vector_store_id, file_id, tenant)


@router.get(f"{STORE}/files/{{file_id}}/content", responses=errors(404))
async def get_vector_store_file_content(
    vector_store_id: str, file_id: str, runtime: RuntimeDep, tenant: TenantDep
) -> FileContentPage:
    return await files_service.store_file_content(runtime, vector_store_id, file_id, tenant)


@router.post(f"{STORE}/file_batches", openapi_extra=json_body(CreateFileBatchRequest), responses=errors(404, 429))
async def create_vector_store_file_batch(
    vector_store_id: str, request: Request, runtime: RuntimeDep, tenant: WorkingTenantDep
) -> VectorStoreFileBatchObject:
    body = parse_body(await request.body(), CreateFileBatchRequest, runtime.settings)
    return await files_service.create_file_batch(runtime, vector_store_id, tenant, body)


@router.get(f"{STORE}/file_batches/{{batch_id}}", responses=errors(404))
async def get_vector_store_file_batch(
    vector_store_id: str, batch_id: str, runtime: RuntimeDep, tenant: TenantDep
) -> VectorStoreFileBatchObject:
    return await files_service.get_file_batch(runtime, vector_store_id, batch_id, tenant)


@router.post(f"{STORE}/file_batches/{{batch_id}}/cancel", responses=errors(404))
async def cancel_vector_store_file_batch(
    vector_store_id: str, batch_id: str, runtime: RuntimeDep, tenant: TenantDep
) -> VectorStoreFileBatchObject:
    return await files_service.cancel_file_batch(runtime, vector_store_id, batch_id, tenant)


@router.get(f"{STORE}/file_batches/{{batch_id}}/files", responses=errors(400, 404))
async def list_vector_store_file_batch_files(
    vector_store_id: str,
    batch_id: str,
    runtime: RuntimeDep,
    tenant: TenantDep,
    page: PageDep,
    filter: str | None = None,
) -> VectorStoreFileList:
    return await files_service.list_store_files(runtime, vector_store_id, tenant, page, filter, batch_id)
