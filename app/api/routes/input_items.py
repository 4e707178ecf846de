"""GET /v1/responses/{id}/input_items: one page of the items that request gave."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import IncludesDep, SessionDep, TenantDep
from app.api.openapi import errors
from app.api.paging import PageDep
from app.schemas.responses import InputItemList
from app.services.input_items import list_input_items

router = APIRouter()


@router.get("/responses/{response_id}/input_items", responses=errors(404))
async def get_input_items(
    response_id: str,
    session: SessionDep,
    tenant: TenantDep,
    includes: IncludesDep,
    page: PageDep,
) -> InputItemList:
    return await list_input_items(session, response_id, tenant, page, includes=includes)
