"""GET /v1/responses: a page of the caller's stored responses, newest first, filtered."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.repositories import response_list as repository
from app.db.repositories.responses import get_response
from app.errors import InvalidRequest
from app.runtime import Runtime
from app.schemas.paging import PageRequest
from app.schemas.response_list import ResponseFilters, ResponseList
from app.services.snapshots import response_from_row


async def list_responses(
    session: AsyncSession, tenant: str, filters: ResponseFilters, page: PageRequest
) -> ResponseList:
    after = None
    if page.after is not None:
        after = await get_response(session, page.after, tenant)
        if after is None:
            raise InvalidRequest(f"Invalid 'after': no response '{page.after}'.", param="after", code="invalid_value")
    rows, has_more = await repository.page_responses(
        session, tenant, filters, limit=page.limit, order=page.order, after=after
    )
    data = [response_from_row(row) for row in rows]
    return ResponseList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=has_more,
    )


async def read_responses(runtime: Runtime, tenant: str, filters: ResponseFilters, page: PageRequest) -> ResponseList:
    """GET /v1/responses: list_responses in a read session of its own (no transaction; see
    create_read_sessionmaker)."""
    async with runtime.read_sessionmaker() as session:
        return await list_responses(session, tenant, filters, page)
