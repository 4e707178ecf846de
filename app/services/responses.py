"""Reading stored responses: retrieve, replay a background stream, delete. The stored row is the truth."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.repositories import responses as repository
from app.errors import InvalidRequest, response_not_found
from app.runtime import Runtime
from app.schemas.responses import TERMINAL_STATUSES, DeletedResponse, ResponseObject
from app.services.includes import with_includes
from app.services.snapshots import response_from_row
from app.services.streams import relay_events


async def get_response(
    session: AsyncSession, response_id: str, tenant: str, *, includes: frozenset[str] = frozenset()
) -> ResponseObject:
    row = await repository.get_response(session, response_id, tenant)
    if row is None:
        raise response_not_found(response_id)
    response = response_from_row(row)
    if includes:
        response.output = with_includes(response.output, includes)
    return response


async def read_response(runtime: Runtime, response_id: str, tenant: str, includes: frozenset[str]) -> ResponseObject:
    """GET a response: get_response in a read session of its own (no transaction; see create_read_sessionmaker)."""
    async with runtime.read_sessionmaker() as session:
        return await get_response(session, response_id, tenant, includes=includes)


async def stream_stored_response(
    runtime: Runtime, response_id: str, tenant: str, starting_after: int | None
) -> AsyncIterator[dict[str, Any]]:
    """GET ?stream=true: replay the stored events after `starting_after`, then follow the live ones."""
    async with runtime.sessionmaker() as session:
        row = await repository.get_response(session, response_id, tenant)
    if row is None:
        raise response_not_found(response_id)
    if not (row.background and row.stream):
        raise InvalidRequest(
            "stream=true is only available for responses created with background and stream.",
            param="stream",
            code="invalid_value",
        )
    subscription = await runtime.queue.bus.subscribe(response_id)
    after = -1 if starting_after is None else starting_after
    return relay_events(runtime, response_id, subscription, after=after, replay=True, stored=True, cancel_on_exit=False)


#: How a delete stops a response still queued or generating (the API: cancel it, then wait until it ended).
StopRunning = Callable[[str], Awaitable[None]]


async def delete_response(
    sessionmaker: async_sessionmaker[AsyncSession], response_id: str, tenant: str, *, stop_running: StopRunning | None
) -> DeletedResponse:
    """Delete a stored response with its items and events. One still queued or generating is stopped first with
    `stop_running`, so that its generation does not go on for a response that is gone; with None (the operator
    CLI, which has no queue to reach a generation through) it is a 400 instead."""
    async with sessionmaker() as session:
        row = await repository.get_response(session, response_id, tenant)
    if row is None:
        raise response_not_found(response_id)
    if row.status not in TERMINAL_STATUSES:
        if stop_running is None:
            raise InvalidRequest(
                f"Response '{response_id}' is still {row.status}: cancel it (POST /v1/responses/{response_id}/cancel) "
                "or wait until it ends, then delete it.",
                param="response_id",
                code="response_in_progress",
            )
        await stop_running(response_id)
    async with sessionmaker() as session, session.begin():
        if not await repository.delete_response(session, response_id, tenant):
            raise response_not_found(response_id)
    return DeletedResponse(id=response_id)
