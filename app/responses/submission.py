"""A prepared response -> stored, enqueued, and answered: at once (background), as a stream, or when done."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import anyio

from app.conversations import turns
from app.db.models import ResponseRow
from app.events.assembler import opening_events
from app.idempotency import claims
from app.jobs import repository as jobs
from app.observability import logs
from app.quotas.stored_bytes import charge_stored_bytes, json_size
from app.responses import repository
from app.responses.preparation import PreparedResponse
from app.responses.reads import read_response
from app.responses.relay import RelayMode
from app.responses.runs import final_response, start_and_follow
from app.runtime import Runtime
from app.schemas.responses import ResponseObject, ResponseParams
from app.tenants.slots import check_queued_background

#: Names the hosted tools (web_search, ...) a create sent that cannot run here: they were left out of what the model
#: sees.
IGNORED_TOOLS_HEADER = "x-llama-responses-ignored-tools"


def answer_headers(prepared: PreparedResponse) -> dict[str, str]:
    """The headers a create's answer carries beside the Response or its stream."""
    return {IGNORED_TOOLS_HEADER: ", ".join(prepared.ignored_tools)} if prepared.ignored_tools else {}


async def _store_new(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> None:
    response = prepared.response
    row = ResponseRow(
        id=response.id,
        tenant=tenant,
        status=response.status,
        model=response.model,
        background=response.background,
        job_class=prepared.job.job_class,
        stream=prepared.stream,
        previous_response_id=response.previous_response_id,
        params=ResponseParams.model_validate(response.model_dump()).model_dump(mode="json"),
        output=[],
        job=prepared.job.to_payload(),
        prompt_cache_fingerprint=prepared.fingerprint.to_payload(),
        created_at=prepared.created,
    )
    # Batch lines are not counted against the cap: their batch submits a bounded number at a time (a refusal here
    # would make a line an error line).
    counted = prepared.job.job_class == "background"
    cap = (await runtime.policy.limits_of(tenant)).max_queued_background if counted else 0
    async with runtime.database.transaction() as session:
        if cap:
            # Counted in the database, which every API node shares. NOTE: two creates at once may both pass at
            # the cap's edge (no lock): the cap bounds a backlog, it is not a quota to the job.
            check_queued_background(await repository.count_queued_background(session, tenant), cap)
        await repository.insert_response(session, row, prepared.items)
        if prepared.key_claim is not None:  # from this commit on, a retry with the key attaches to this response
            await claims.bind_response(session, prepared.key_claim)
        if prepared.job.announced:
            # Stored with the row: a background stream's client gets them at once, and a replay starts with them.
            events = [event.model_dump(mode="json") for event in opening_events(response)]
            await jobs.insert_events(session, response.id, events)
        if prepared.conversation is not None:
            await turns.claim(session, prepared.conversation, response.id, tenant)
        # Last: on Postgres the charge holds the tenant's quota row until the commit. Its output counts from the
        # next measurement.
        await charge_stored_bytes(session, runtime, tenant, lambda: json_size(row.params, prepared.items))
    # This node's list pages show it from now on, before the notification of its insert comes back.
    runtime.read_cache.changed(tenant, response.id)


async def submit_response(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> None:
    """Store (when asked), commit, then enqueue: no job ever points at an uncommitted row. Whole, even if the
    client leaves meanwhile (a cancellation): a stored response is never left without its job."""
    with anyio.CancelScope(shield=True):
        await _submit(runtime, prepared, tenant)


async def _submit(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> None:
    logs.bind(response_id=prepared.response.id, model=prepared.response.model)
    # Its prompt, known exactly now, is charged before anything is stored (a 429 leaves nothing behind); its output
    # is charged where it ends (jobs/execution.py).
    await runtime.limits.admit_tokens(tenant, len(prepared.job.prompt_tokens))
    if prepared.job.store:
        await _store_new(runtime, prepared, tenant)
    elif prepared.conversation is not None:
        async with runtime.database.transaction() as session:
            await turns.claim(session, prepared.conversation, prepared.response.id, tenant)
            # Its response is not kept, but the conversation keeps its input (issue 37: a project at its quota
            # stored 4 x 12 KB more through `store: false` turns): charged, or refused, as a stored turn's is. Its
            # output, as a stored turn's, counts from the next measurement.
            await charge_stored_bytes(session, runtime, tenant, lambda: json_size(prepared.job.conversation_input))
    try:
        await runtime.queue.enqueue(prepared.job)
    except Exception:
        # Nothing half-stored: a response whose job could not be queued would wait forever.
        async with runtime.database.transaction() as session:
            if prepared.job.store:
                await repository.delete_response(session, prepared.response.id, tenant)
            if prepared.key_claim is not None:
                await claims.forget_response(session, prepared.key_claim)
            if prepared.conversation is not None:
                await turns.release(session, prepared.conversation, prepared.response.id)
        raise


def _relay_mode(prepared: PreparedResponse) -> RelayMode:
    if prepared.job.keep_events:  # a background stream: its events are stored (its opening ones already)
        return RelayMode.REPLAY
    return RelayMode.STORED if prepared.job.store else RelayMode.UNSTORED


def _snapshot(prepared: PreparedResponse, mode: RelayMode) -> ResponseObject | None:
    """What the relay ends a foreground response with, failed, when it cannot learn how it ends (its job died
    unstored, or the database stays unreachable). A JSON create of a stored response has none: it answers 503."""
    if mode is RelayMode.REPLAY or (mode is RelayMode.STORED and not prepared.stream):
        return None
    return prepared.response


async def open_stream(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> AsyncIterator[dict[str, Any]]:
    """Subscribe, store and enqueue (before the first event, so faults are plain HTTP errors), then relay."""
    mode = _relay_mode(prepared)
    return await start_and_follow(
        runtime,
        prepared.job,
        mode,
        partial(submit_response, runtime, prepared, tenant),
        snapshot=_snapshot(prepared, mode),
    )


async def create_response(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> ResponseObject:
    """Non-streaming create: background returns at once (queued); otherwise wait for the terminal event."""
    if prepared.response.background:
        await submit_response(runtime, prepared, tenant)
        return prepared.response
    final = await final_response(await open_stream(runtime, prepared, tenant))
    if final is None:  # the terminal event was missed: the stored row has the final state
        return await read_response(runtime.database, prepared.response.id, tenant)
    return final
