"""POST /v1/responses/{id}/cancel: stop a background response and return it as it ended."""

from __future__ import annotations

import asyncio
import time

from app.db.repositories import responses as repository
from app.errors import InvalidRequest, response_not_found
from app.runtime import Runtime
from app.schemas.responses import TERMINAL_STATUSES, ResponseObject
from app.services.snapshots import response_from_row

CANCEL_WAIT_S = 10.0
CANCEL_POLL_S = 0.02


async def cancel_response(runtime: Runtime, response_id: str, tenant: str) -> ResponseObject:
    async with runtime.sessionmaker() as session, session.begin():
        row = await repository.get_response(session, response_id, tenant)
        if row is None:
            raise response_not_found(response_id)
        if not row.background:
            raise InvalidRequest("Cannot cancel a synchronous response.", param="response_id", code="invalid_value")
        if row.status in ("completed", "failed", "incomplete"):
            raise InvalidRequest(f"Cannot cancel a {row.status} response.", param="response_id", code="invalid_value")
        if row.status == "queued":
            # Never started: cancelled here, and the worker that takes the job finds it is no longer queued.
            await repository.transition(session, response_id, from_statuses=("queued",), values={"status": "cancelled"})
    await runtime.queue.cancel(response_id)
    deadline = time.monotonic() + CANCEL_WAIT_S
    while True:
        async with runtime.sessionmaker() as session, session.begin():
            row = await repository.get_response(session, response_id, tenant)
            if row is None:
                raise response_not_found(response_id)
            if row.status in TERMINAL_STATUSES:
                return response_from_row(row)
            if time.monotonic() > deadline:
                # The worker did not answer (it may be gone): stop waiting; a late finish cannot overwrite this.
                await repository.transition(
                    session, response_id, from_statuses=("in_progress",), values={"status": "cancelled"}
                )
                continue
        await asyncio.sleep(CANCEL_POLL_S)


async def stop_response(runtime: Runtime, response_id: str) -> None:
    """Stop a response's generation, whatever started it (DELETE of a running response): cancelled if still
    queued, else signalled; waits until it ended (at most CANCEL_WAIT_S) so that nothing writes to it after."""
    async with runtime.sessionmaker() as session, session.begin():
        await repository.transition(session, response_id, from_statuses=("queued",), values={"status": "cancelled"})
    await runtime.queue.cancel(response_id)
    deadline = time.monotonic() + CANCEL_WAIT_S
    while time.monotonic() < deadline:
        async with runtime.sessionmaker() as session:
            status = await repository.get_status(session, response_id)
        if status is None or status in TERMINAL_STATUSES:
            return
        await asyncio.sleep(CANCEL_POLL_S)
