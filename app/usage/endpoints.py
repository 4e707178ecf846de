"""/v1/usage (an extension): what a project used, per UTC day, model or project, as JSON or as CSV
(/v1/usage.csv), and what it keeps stored (/v1/usage/storage). A member reads its own project's; an admin any
project's (`project=`), or every one's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from app.api.deps import IdentityDep, RuntimeDep
from app.api.openapi import errors
from app.usage import service
from app.usage.schemas import StorageUsage, UsageReport

router = APIRouter(responses=errors(400, 403, 404))

StartParam = Annotated[str | None, Query(description="First UTC day, YYYY-MM-DD (default: 29 days before `end`).")]
EndParam = Annotated[str | None, Query(description="Last UTC day, inclusive, YYYY-MM-DD (default: today).")]
ModelParam = Annotated[str | None, Query(description="Only this model's usage.")]
GroupParam = Annotated[str | None, Query(description="day, project, model, or several, comma-separated.")]
ProjectParam = Annotated[
    str | None, Query(description="Admins: one project's usage (its name, or a tenant as reports name it).")
]


async def get_usage_query(
    start: StartParam = None,
    end: EndParam = None,
    model: ModelParam = None,
    group_by: GroupParam = None,
    project: ProjectParam = None,
) -> service.UsageQuery:
    """The query of both routes, as sent (checked by the service)."""
    return service.UsageQuery(start=start, end=end, model=model, group_by=group_by, project=project)


UsageQueryDep = Annotated[service.UsageQuery, Depends(get_usage_query)]


@router.get("/usage")
async def get_usage(runtime: RuntimeDep, identity: IdentityDep, query: UsageQueryDep) -> UsageReport:
    """Requests, input (cached) and output tokens and generation seconds, summed per group, for at most 366 days."""
    return await service.read_usage(runtime.database, identity, query)


@router.get("/usage/storage")
async def get_storage(runtime: RuntimeDep, identity: IdentityDep, project: ProjectParam = None) -> StorageUsage:
    """The bytes a project keeps stored and its stored-bytes quota (RESPONSES_MAX_STORED_BYTES_PER_TENANT)."""
    return await service.read_storage(runtime, identity, project)


@router.get("/usage.csv", response_class=Response, responses={200: {"content": {"text/csv": {}}}})
async def get_usage_csv(runtime: RuntimeDep, identity: IdentityDep, query: UsageQueryDep) -> Response:
    """The same report as CSV: a header, then a line a group."""
    report = await service.read_usage(runtime.database, identity, query)
    disposition = f'attachment; filename="{service.csv_filename(report)}"'
    return Response(
        service.as_csv(report), media_type="text/csv; charset=utf-8", headers={"Content-Disposition": disposition}
    )
