"""Dependencies as Annotated aliases: the runtime, the settings, the caller's tenant, `include` on reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Query, Request

from app.config import Settings
from app.items.includes import parse_includes
from app.observability import logs
from app.runtime import Runtime
from app.tenants.identity import tenant_for


# NOTE: async, though they wait on nothing: FastAPI runs plain `def` dependencies on a thread pool, three
# thread hops per request that showed up as most of a GET's time under load.
async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_settings(runtime: RuntimeDep) -> Settings:
    return runtime.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


async def get_tenant(request: Request, runtime: RuntimeDep) -> AsyncIterator[str]:
    """The caller's tenant, holding one of its in-flight slots until the response is sent in full (a stream's
    last event included): a 429 when it has none left."""
    tenant = tenant_for(request.headers.get("authorization", ""), runtime.settings)
    logs.bind(tenant=tenant)
    runtime.limits.watch(tenant)  # the response's x-ratelimit-* headers are this tenant's
    with runtime.slots.hold(tenant):
        yield tenant


TenantDep = Annotated[str, Depends(get_tenant)]


async def get_working_tenant(runtime: RuntimeDep, tenant: TenantDep) -> str:
    """The caller's tenant, for a route that does work: the request counts against the tenant's requests per
    minute (a 429 when they are spent). Reads, deletes and cancels do not count (see docs/operating/rate-limits.md)."""
    await runtime.limits.admit_request(tenant)
    return tenant


WorkingTenantDep = Annotated[str, Depends(get_working_tenant)]


async def get_includes(
    include: Annotated[list[str] | None, Query()] = None,
    include_brackets: Annotated[list[str] | None, Query(alias="include[]")] = None,
) -> frozenset[str]:
    """`include` on a read, sent as include= or include[]= (the SDK sends the latter): checked, then merged."""
    return parse_includes([*(include or []), *(include_brackets or [])])


IncludesDep = Annotated[frozenset[str], Depends(get_includes)]
