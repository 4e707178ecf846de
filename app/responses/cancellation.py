"""Cancelling a response: the request is stored first, then whoever holds the job (or later takes it) honours it.

POST /v1/responses/{id}/cancel waits for the response to end; DELETE of a running response cancels it first
(`request_cancellation`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from app.db.base import utc_now
from app.db.models import ResponseRow
from app.errors import InvalidRequest, response_not_found
from app.events.snapshot import response_from_row
from app.events.terminal import TERMINAL_STATUSES
from app.jobs import repository as jobs
from app.jobs.recovery import end_response
from app.responses import repository
from app.runtime import Runtime
from app.schemas.responses import ResponseObject

logger = logging.getLogger(__name__)

CANCEL_POLL_S = 0.02
#: How often a waiting cancel checks whether the lease it waits on expired (its worker died).
LEASE_CHECK_S = 1.0
#: Beyond the lease: time for the worker that holds the job to store its end after the lease would expire.
CANCEL_WAIT_SLACK_S = 2.0


async def request_cancellation(runtime: Runtime, response_id: str) -> None:
    """Store the cancel request; end the response here if nobody holds its job (queued, or its worker died);
    then signal the worker that holds it. The stored request outlives the signal: the worker's heartbeat
    and its claim read it, whatever Redis did meanwhile."""
    async with runtime.database.transaction() as session:
        await jobs.request_cancel(session, response_id, now=utc_now())
    await end_response(runtime.database, runtime.queue.bus, response_id, status="cancelled")
    try:
        await runtime.queue.cancel(response_id)
    except Exception as error:
        logger.warning(
            "could not signal the cancel of %s (%s); its worker reads it on its next beat", response_id, error
        )


async def _wait_for_end(runtime: Runtime, response_id: str) -> ResponseRow | None:
    """The row once the response has ended, or as it is after about a lease (its worker still holds it);
    None when it is gone."""
    deadline = time.monotonic() + runtime.settings.lease_s + CANCEL_WAIT_SLACK_S
    next_lease_check = time.monotonic() + LEASE_CHECK_S
    while True:
        async with runtime.database.read() as session:
            row = await repository.get_by_id(session, response_id)
        if row is None or row.status in TERMINAL_STATUSES or time.monotonic() > deadline:
            # NOTE: past the deadline the response is returned as it is, not marked cancelled: only the worker
            # holding the job (or, once its lease expires, reconciliation) may end it, so GET never disagrees
            # with what the generation does.
            return row
        if time.monotonic() > next_lease_check:
            # The worker may have died: once its lease expires nobody else would end the response.
            await end_response(runtime.database, runtime.queue.bus, response_id, status="cancelled")
            next_lease_check = time.monotonic() + LEASE_CHECK_S
        await asyncio.sleep(CANCEL_POLL_S)


async def cancel_response(runtime: Runtime, response_id: str, tenant: str) -> ResponseObject:
    async with runtime.database.read() as session:
        row = await repository.get_response(session, response_id, tenant)
        if row is None:
            raise response_not_found(response_id)
        if not row.background:
            raise InvalidRequest("Cannot cancel a synchronous response.", param="response_id", code="invalid_value")
        if row.status in ("completed", "failed", "incomplete"):
            raise InvalidRequest(f"Cannot cancel a {row.status} response.", param="response_id", code="invalid_value")
    await request_cancellation(runtime, response_id)
    ended = await _wait_for_end(runtime, response_id)
    if ended is None:
        raise response_not_found(response_id)
    return response_from_row(ended)


async def stop_response(runtime: Runtime, response_id: str) -> None:
    """Stop a response's generation, whatever started it (DELETE of a running response): the cancel is stored,
    then this waits until the response ended (at most about a lease) so that nothing writes to it after."""
    await request_cancellation(runtime, response_id)
    await _wait_for_end(runtime, response_id)
