"""/openapi.json, /docs and /redoc, behind the same key as /v1 unless RESPONSES_PUBLIC_DOCS opens them: a keyed
server shows a stranger nothing of its API."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from app.api.deps import RuntimeDep, SettingsDep
from app.api.openapi import describe_api

OPENAPI_PATH = "/openapi.json"


async def check_docs_access(request: Request, runtime: RuntimeDep) -> None:
    if not runtime.settings.public_docs:
        # A 401 without a valid key, if keyed; any role may read them.
        await runtime.authenticator.identify(request.headers.get("authorization", ""))


router = APIRouter(include_in_schema=False, dependencies=[Depends(check_docs_access)])


@router.get(OPENAPI_PATH)
async def openapi_document(request: Request, settings: SettingsDep) -> JSONResponse:
    document: dict[str, Any] = describe_api(request.app, settings)
    return JSONResponse(document)


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(openapi_url=OPENAPI_PATH, title=f"{request.app.title} - Swagger UI")


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(openapi_url=OPENAPI_PATH, title=f"{request.app.title} - ReDoc")
