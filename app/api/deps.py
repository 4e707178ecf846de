"""Dependencies as Annotated aliases: the runtime, a request-scoped session, the caller's tenant."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.errors import Unauthorized
from app.observability import logs
from app.runtime import Runtime
from app.services.includes import parse_includes

OPEN_TENANT = "public"


# NOTE: async, though they wait on nothing: FastAPI runs plain `def` dependencies on a thread pool, three
# thread hops per request that showed up as most of a GET's time under load.
async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_settings(runtime: RuntimeDep) -> Settings:
    return runtime.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


async def get_session(runtime: RuntimeDep) -> AsyncIterator[AsyncSession]:
    """One unit of work per request: commit on success, roll back on error."""
    async with runtime.sessionmaker() as session, session.begin():
        yield session


# scope="function": the transaction commits when the endpoint returns, before the response is sent; with the
# default scope it committed after, and a client's next request could miss its own write (a DELETE, say).
SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]


async def get_tenant(request: Request, runtime: RuntimeDep) -> AsyncIterator[str]:
    """The caller's tenant, holding one of its in-flight slots until the response is sent in full (a stream's
    last event included): a 429 when it has none left."""
    tenant = tenant_for(request.headers.get("authorization", ""), runtime.settings)
    logs.bind(tenant=tenant)
    with runtime.slots.hold(tenant):
        yield tenant


def tenant_for(authorization: str, settings: Settings) -> str:
    """The caller's tenant from its Authorization header (HTTP and WebSocket alike): one per API key (a hash,
    never the key itself); one tenant on an open server."""
    if not settings.api_keys:
        return OPEN_TENANT
    scheme, _, key = authorization.partition(" ")
    if scheme.lower() != "bearer" or not key:
        raise Unauthorized(
            "You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY'.",
            code="missing_api_key",
        )
    sent = _key_bytes(key.strip())
    if not any(hmac.compare_digest(sent, known.encode()) for known in settings.api_keys):
        raise Unauthorized("Incorrect API key provided.", code="invalid_api_key")
    return tenant_of_key(sent)


def tenant_of_key(key: bytes) -> str:
    """The tenant an API key stands for (a hash: the key itself is never stored)."""
    return "key:" + hashlib.sha256(key).hexdigest()[:32]


def _key_bytes(key: str) -> bytes:
    """The key as the client sent it: HTTP headers arrive decoded as Latin-1, so encoding them back gives the raw
    (UTF-8) bytes; compare_digest takes str only when it is ASCII, hence bytes."""
    try:
        return key.encode("latin-1")
    except UnicodeEncodeError:  # not from an HTTP header (a test, say): already the text itself
        return key.encode("utf-8", "surrogatepass")


TenantDep = Annotated[str, Depends(get_tenant)]


async def get_includes(
    include: Annotated[list[str] | None, Query()] = None,
    include_brackets: Annotated[list[str] | None, Query(alias="include[]")] = None,
) -> frozenset[str]:
    """`include` on a read, sent as include= or include[]= (the SDK sends the latter): checked, then merged."""
    return parse_includes([*(include or []), *(include_brackets or [])])


IncludesDep = Annotated[frozenset[str], Depends(get_includes)]
