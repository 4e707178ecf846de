"""A prepared response -> stored, enqueued, and answered: at once (background), as a stream, or when done."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

from app.db.models import ResponseRow
from app.db.repositories import responses as repository
from app.errors import ServerError, ServiceUnavailable
from app.observability import logs
from app.queue.base import GenerationJob, Subscription
from app.runtime import Runtime
from app.schemas.responses import ResponseObject, ResponseParams
from app.services import conversation_turns
from app.services.assembly import opening_events
from app.services.responses import get_response
from app.services.streams import TERMINAL_EVENT_TYPES, relay_events

if TYPE_CHECKING:  # preparation uses compaction, which runs its summaries through here
    from app.services.preparation import PreparedResponse


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
        created_at=prepared.created,
    )
    async with runtime.sessionmaker() as session, session.begin():
        await repository.insert_response(session, row, prepared.items)
        if prepared.job.announced:
            # Stored with the row: a background stream's client gets them at once, and a replay starts with them.
            events = [event.model_dump(mode="json") for event in opening_events(response)]
            await repository.insert_events(session, response.id, events)
        if prepared.conversation is not None:
            await conversation_turns.claim(session, prepared.conversation, response.id, tenant)


async def submit_response(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> None:
    """Store (when asked), commit, then enqueue: no job ever points at an uncommitted row."""
    logs.bind(response_id=prepared.response.id, model=prepared.response.model)
    if prepared.job.store:
        await _store_new(runtime, prepared, tenant)
    elif prepared.conversation is not None:
        async with runtime.sessionmaker() as session, session.begin():
            await conversation_turns.claim(session, prepared.conversation, prepared.response.id, tenant)
    try:
        await runtime.queue.enqueue(prepared.job)
    except Exception:
        # Nothing half-stored: a response whose job could not be queued would wait forever.
        with anyio.CancelScope(shield=True):
            async with runtime.sessionmaker() as session, session.begin():
                if prepared.job.store:
                    await repository.delete_response(session, prepared.response.id, tenant)
                if prepared.conversation is not None:
                    await conversation_turns.release(session, prepared.conversation, prepared.response.id)
        raise


async def _require_worker(runtime: Runtime, model: str) -> None:
    # A background job may wait in the queue for a worker; a client holding a connection should not.
    if not await runtime.queue.live_workers(model):
        raise ServiceUnavailable(
            f"No worker serving the model '{model}' is available to generate this response.",
            param="model",
            code="no_workers",
        )


async def open_stream(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> AsyncIterator[dict[str, Any]]:
    """Subscribe, store and enqueue (before the first event, so faults are plain HTTP errors), then relay."""
    if not prepared.response.background:
        await _require_worker(runtime, prepared.job.model)
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
        # A background stream's events are stored (its opening ones already): gaps in the live feed are filled.
        replay=prepared.job.keep_events,
        stored=prepared.job.store,
        cancel_on_exit=not prepared.response.background,
        snapshot=None if prepared.job.store else prepared.response,
    )


async def _final_response(events: AsyncIterator[dict[str, Any]]) -> ResponseObject | None:
    final: dict[str, Any] | None = None
    async for event in events:
        if event["type"] in TERMINAL_EVENT_TYPES:
            final = event["response"]
    return ResponseObject.model_validate(final) if final is not None else None


async def create_response(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> ResponseObject:
    """Non-streaming create: background returns at once (queued); otherwise wait for the terminal event."""
    if prepared.response.background:
        await submit_response(runtime, prepared, tenant)
        return prepared.response
    final = await _final_response(await open_stream(runtime, prepared, tenant))
    if final is None:  # the terminal event was missed: the stored row has the final state
        async with runtime.sessionmaker() as session:
            return await get_response(session, prepared.response.id, tenant)
    return final


async def generate_unstored(runtime: Runtime, job: GenerationJob) -> ResponseObject:
    """A job that keeps nothing (a compaction's summary), on the normal path: enqueued, run where the model is,
    its events relayed here until the end."""
    await _require_worker(runtime, job.model)
    subscription: Subscription = await runtime.queue.bus.subscribe(job.response_id)
    try:
        await runtime.queue.enqueue(job)
    except BaseException:
        await subscription.close()
        raise
    events = relay_events(
        runtime,
        job.response_id,
        subscription,
        after=-1,
        replay=False,
        stored=False,
        cancel_on_exit=True,
        snapshot=ResponseObject.model_validate(job.response),
    )
    final = await _final_response(events)
    if final is None:
        raise ServerError("The generation ended without a result.", code="server_error")
    return final
