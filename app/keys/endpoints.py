"""/v1/keys (an extension, for admin keys): list, create and revoke the API keys kept in the database, as the
`llama-responses keys` commands do; /v1/projects/{id}/limits: a project's own limits, as `projects limits` sets
them."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from app.api.deps import IdentityDep, RuntimeDep
from app.api.openapi import errors, json_body
from app.idempotency.answers import create_once
from app.idempotency.header import keyed_request, with_key_header
from app.keys import project_limits, service
from app.keys.schemas import (
    MAX_NAME_CHARS,
    ApiKey,
    ApiKeyCreateRequest,
    ApiKeyList,
    CreatedApiKey,
    ProjectLimits,
    ProjectLimitsUpdate,
)
from app.schemas.parsing import parse_body
from app.tenants.identity import Identity


async def require_admin(identity: IdentityDep) -> Identity:
    identity.require_admin()
    return identity


router = APIRouter(dependencies=[Depends(require_admin)], responses=errors(403))


@router.get("/keys", responses=errors(404))
async def list_keys(
    runtime: RuntimeDep, project: Annotated[str | None, Query(max_length=MAX_NAME_CHARS)] = None
) -> ApiKeyList:
    """Every key (of one project, by name, if given), oldest first; never the keys themselves."""
    return await service.list_keys(runtime.database, project)


@router.post(
    "/keys",
    response_model=CreatedApiKey,
    openapi_extra=with_key_header(json_body(ApiKeyCreateRequest)),
    responses=errors(409),
)
async def create_key(request: Request, runtime: RuntimeDep, identity: IdentityDep) -> CreatedApiKey | Response:
    """A new key of the project (created if new): `value` is the key, shown in this answer only (and to a retry
    with the same Idempotency-Key)."""
    raw = await request.body()
    body = parse_body(raw, ApiKeyCreateRequest, runtime.settings)
    create = partial(service.create_key, runtime.database, body)
    return await create_once(runtime, identity.tenant, keyed_request(request, raw), create)


@router.delete("/keys/{key_id}", responses=errors(404))
async def revoke_key(key_id: str, runtime: RuntimeDep) -> ApiKey:
    """Revoke the key (it stays listed, with `revoked_at`): every API node refuses it within
    RESPONSES_KEY_CACHE_TTL_S."""
    return await service.revoke_key(runtime.database, key_id)


@router.get("/projects/{project_id}/limits", responses=errors(404))
async def read_project_limits(project_id: str, runtime: RuntimeDep) -> ProjectLimits:
    """The project's own limits (`overrides`, null: the server's setting) and those that apply (`effective`)."""
    return await project_limits.read_limits(runtime.database, runtime.settings, project_id)


@router.post("/projects/{project_id}/limits", responses=errors(400, 404), openapi_extra=json_body(ProjectLimitsUpdate))
async def set_project_limits(project_id: str, request: Request, runtime: RuntimeDep) -> ProjectLimits:
    """Set the limits given (null: back to the server's setting; 0: off); the others stay. Every API node and
    worker applies them within RESPONSES_KEY_CACHE_TTL_S."""
    body = parse_body(await request.body(), ProjectLimitsUpdate, runtime.settings)
    return await project_limits.set_limits(runtime.database, runtime.settings, project_id, body)
