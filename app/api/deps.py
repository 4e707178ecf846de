"""Dependencies as Annotated aliases: the runtime, the settings, the caller (its identity and tenant), `include` on
reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Annotated

from fastapi import Depends, Query, Request

from app.config import Settings
from app.items.includes import parse_includes
from app.observability import logs
from app.runtime import Runtime
from app.tenants.identity import PROJECT_HEADER, READ_METHODS, Identity


# NOTE: async, though they wait on nothing: FastAPI runs plain `def` dependencies on a thread pool, three
# thread hops per request that showed up as most of a GET's time under load.
async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_settings(runtime: RuntimeDep) -> Settings:
    return runtime.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


async def _identify(request: Request, runtime: Runtime) -> tuple[Identity, int]:
    """The caller and how many requests its tenant may have in flight (see get_identity)."""
    identity = await runtime.authenticator.identify(
        request.headers.get("authorization", ""), request.headers.get(PROJECT_HEADER)
    )
    if request.method not in READ_METHODS:
        identity.require_write()
    logs.bind(tenant=identity.tenant)
    runtime.limits.watch(identity.tenant)  # the response's x-ratelimit-* headers are this tenant's
    limits = await runtime.policy.limits_of(identity.tenant)
    return identity, limits.max_concurrent_requests


async def get_identity(request: Request, runtime: RuntimeDep) -> AsyncIterator[Identity]:
    """The caller, holding one of its tenant's in-flight slots until the response is sent in full (a stream's
    last event included): a 401 without a valid key, a 403 for a `read` key's write, a 429 when its tenant has no
    slot left. An admin's OpenAI-Project header makes it act on that project (app/tenants/identity.py)."""
    identity, max_in_flight = await _identify(request, runtime)
    with runtime.slots.hold(identity.tenant, max_in_flight):
        yield identity


IdentityDep = Annotated[Identity, Depends(get_identity)]


async def get_tenant(identity: IdentityDep) -> str:
    """The caller's tenant (see get_identity)."""
    return identity.tenant


TenantDep = Annotated[str, Depends(get_tenant)]


async def get_working_tenant(runtime: RuntimeDep, tenant: TenantDep) -> str:
    """The caller's tenant, for a route that does work: the request counts against the tenant's requests per
    minute (a 429 when they are spent). Reads, deletes and cancels do not count (see docs/operating/rate-limits.md)."""
    await runtime.limits.admit_request(tenant)
    return tenant


WorkingTenantDep = Annotated[str, Depends(get_working_tenant)]


#: `include`, sent as include= or include[]= (the SDK sends the latter); parse_includes checks and merges them.
IncludeQuery = Annotated[list[str] | None, Query()]
IncludeBracketsQuery = Annotated[list[str] | None, Query(alias="include[]")]


def includes_of(include: list[str] | None, include_brackets: list[str] | None) -> frozenset[str]:
    """`include` on a read, sent as include= or include[]= (the SDK sends the latter): checked, then merged."""
    return parse_includes([*(include or []), *(include_brackets or [])])


async def get_includes(include: IncludeQuery = None, include_brackets: IncludeBracketsQuery = None) -> frozenset[str]:
    return includes_of(include, include_brackets)


IncludesDep = Annotated[frozenset[str], Depends(get_includes)]


@dataclass(frozen=True, slots=True)
class Caller:
    """The runtime and the caller's tenant, as the read routes need them."""

    runtime: Runtime
    tenant: str


async def get_caller(request: Request) -> Caller:
    """get_runtime, get_identity and get_tenant in one dependency, for the hot read routes (GET a response, the
    list): each dependency FastAPI solves costs a request CPU time, and these three were most of a cached GET's
    share of it. The same checks; the tenant's slot is held until the response is sent in full as get_identity's
    is, but given back by the rate-limit headers' middleware rather than by a dependency with `yield` (FastAPI's
    exit stack and shielded cancel scope for it were a tenth of a cached GET's CPU time)."""
    runtime: Runtime = request.app.state.runtime
    identity, max_in_flight = await _identify(request, runtime)
    runtime.slots.acquire(identity.tenant, max_in_flight)
    if not runtime.limits.release_when_sent(partial(runtime.slots.release, identity.tenant)):
        runtime.slots.release(identity.tenant)  # no response to hold it for: the check alone
    return Caller(runtime, identity.tenant)


CallerDep = Annotated[Caller, Depends(get_caller)]
