"""A prepared response -> stored, enqueued, and answered: at once (background), as a stream, or when done."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import anyio

from app.db.models import ResponseRow
from app.db.repositories import responses as repository
from app.errors import ServiceUnavailable
from app.runtime import Runtime
from app.schemas.responses import ResponseObject, ResponseParams
from app.services.preparation import PreparedResponse
from app.services.responses import get_response
from app.services.streams import TERMINAL_EVENT_TYPES, relay_events


async def _store_new(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> None:
    response = prepared.response
    row = ResponseRow(
        id=response.id,
        tenant=tenant,
        status=response.status,
        model=response.model,
        background=response.background,
        stream=prepared.stream,
        previous_response_id=response.previous_response_id,
        params=ResponseParams.model_validate(response.model_dump()).model_dump(mode="json"),
        output=[],
        job=prepared.job.to_payload(),
        created_at=datetime.fromtimestamp(response.created_at, UTC),
    )
    async with runtime.sessionmaker() as session, session.begin():
        await repository.insert_response(session, row, prepared.items)


async def submit_response(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> None:
    """Store (when asked), commit, then enqueue: no job ever points at an uncommitted row."""
    if prepared.job.store:
        await _store_new(runtime, prepared, tenant)
    try:
        await runtime.queue.enqueue(prepared.job)
    except Exception:
        if prepared.job.store:
            # Nothing half-stored: a response whose job could not be queued would wait forever.
            with anyio.CancelScope(shield=True):
                async with runtime.sessionmaker() as session, session.begin():
                    await repository.delete_response(session, prepared.response.id, tenant)
        raise


async def open_stream(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> AsyncIterator[dict[str, Any]]:
    """Subscribe, store and enqueue (before the first event, so faults are plain HTTP errors), then relay."""
    if not prepared.response.background and not await runtime.queue.workers_alive():
        # A background job may wait in the queue for a worker; a client holding a connection should not.
        raise ServiceUnavailable("No worker is available to generate this response.", code="no_workers")
    subscription = await runtime.queue.bus.subscribe(prepared.response.id)
    try:
        await submit_response(runtime, prepared, tenant)
    except BaseException:
        await subscription.close()
        raise
    return relay_events(
        runtime,
        prepared.response.id,
        subscription,
        after=-1,
        replay=False,
        stored=prepared.job.store,
        cancel_on_exit=not prepared.response.background,
    )


async def create_response(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> ResponseObject:
    """Non-streaming create: background returns at once (queued); otherwise wait for the terminal event."""
    if prepared.response.background:
        await submit_response(runtime, prepared, tenant)
        return prepared.response
    final: dict[str, Any] | None = None
    async for event in await open_stream(runtime, prepared, tenant):
        if event["type"] in TERMINAL_EVENT_TYPES:
            final = event["response"]
    if final is None:  # the terminal event was missed: the stored row has the final state
        async with runtime.sessionmaker() as session:
            return await get_response(session, prepared.response.id, tenant)
    return ResponseObject.model_validate(final)
