"""GET /v1/responses/{id}/input_items: one page of the items that request gave."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from app.api.deps import SessionDep, TenantDep
from app.schemas.responses import InputItemList
from app.services.includes import parse_includes
from app.services.input_items import list_input_items

router = APIRouter()


@router.get("/responses/{response_id}/input_items")
async def get_input_items(
    response_id: str,
    session: SessionDep,
    tenant: TenantDep,
    limit: int = 20,
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
    include: Annotated[list[str] | None, Query()] = None,
    include_brackets: Annotated[list[str] | None, Query(alias="include[]")] = None,
) -> InputItemList:
    includes = parse_includes([*(include or []), *(include_brackets or [])])
    return await list_input_items(
        session, response_id, tenant, limit=limit, order=order, after=after, includes=includes
    )
