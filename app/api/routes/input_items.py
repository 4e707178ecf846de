"""GET /v1/responses/{id}/input_items: one page of the items that request gave."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter

from app.api.deps import IncludesDep, SessionDep, TenantDep
from app.api.openapi import errors
from app.schemas.responses import InputItemList
from app.services.input_items import list_input_items

router = APIRouter()


@router.get("/responses/{response_id}/input_items", responses=errors(404))
async def get_input_items(
    response_id: str,
    session: SessionDep,
    tenant: TenantDep,
    includes: IncludesDep,
    limit: int = 20,
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> InputItemList:
    return await list_input_items(
        session, response_id, tenant, limit=limit, order=order, after=after, includes=includes
    )
