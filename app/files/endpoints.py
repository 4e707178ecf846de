"""/v1/files: upload (multipart), list, retrieve, delete, content. Thin: parse, call one service function, reply."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.datastructures import UploadFile

from app.api.deps import RuntimeDep, TenantDep
from app.api.openapi import errors
from app.api.paging import PageDep
from app.errors import InvalidRequest
from app.files import service
from app.files.schemas import FileDeleted, FileList, FileObject
from app.files.storage import CHUNK_BYTES
from app.idempotency.answers import create_once
from app.idempotency.header import keyed_upload, with_key_header

router = APIRouter()

UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "purpose"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "purpose": {"type": "string", "enum": ["batch"]},
                    },
                }
            }
        },
    }
}


async def _upload_chunks(upload: UploadFile) -> AsyncIterator[bytes]:
    while data := await upload.read(CHUNK_BYTES):
        yield data


@router.post(
    "/files", response_model=FileObject, openapi_extra=with_key_header(UPLOAD_BODY), responses=errors(409, 413)
)
async def create_file(request: Request, runtime: RuntimeDep, tenant: TenantDep) -> FileObject | Response:
    # Starlette spools the file part to a temporary file past 1 MiB: it is never held whole in memory.
    # NOTE: spooled first, then copied into the database a chunk at a time in one short unit of work, rather than
    # written as it arrives: a slow client would otherwise hold a transaction (SQLite's one writer) open.
    async with request.form(max_files=1, max_fields=8) as form:
        purpose = form.get("purpose")
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidRequest(
                "Missing required parameter: 'file' (a multipart/form-data file part).",
                param="file",
                code="missing_required_parameter",
            )
        checked = service.check_purpose(purpose if isinstance(purpose, str) else None)
        filename = upload.filename or "upload"
        # With an Idempotency-Key, the file is read once more first: the hash covers its bytes.
        keyed = await keyed_upload(request, (checked, filename), _upload_chunks(upload))
        await upload.seek(0)
        upload_file = partial(
            service.upload_file, runtime, tenant, purpose=checked, filename=filename, content=_upload_chunks(upload)
        )
        return await create_once(runtime, tenant, keyed, upload_file)


@router.get("/files", responses=errors(400))
async def list_files(runtime: RuntimeDep, tenant: TenantDep, page: PageDep, purpose: str | None = None) -> FileList:
    return await service.list_files(runtime, tenant, purpose, page)


@router.get("/files/{file_id}", responses=errors(404))
async def get_file(file_id: str, runtime: RuntimeDep, tenant: TenantDep) -> FileObject:
    return await service.get_file(runtime, file_id, tenant)


@router.delete("/files/{file_id}", responses=errors(404))
async def delete_file(file_id: str, runtime: RuntimeDep, tenant: TenantDep) -> FileDeleted:
    return await service.delete_file(runtime.database, file_id, tenant)


@router.get(
    "/files/{file_id}/content",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/octet-stream": {}}}, **errors(404)},
)
async def get_file_content(file_id: str, runtime: RuntimeDep, tenant: TenantDep) -> StreamingResponse:
    chunks = await service.file_content(runtime.database, file_id, tenant)
    return StreamingResponse(chunks, media_type="application/octet-stream")
