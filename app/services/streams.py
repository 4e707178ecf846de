"""Relaying one response's events to a client: stored ones first (replay), then live ones, each exactly once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio

from app.db.repositories import responses as repository
from app.queue.base import Subscription
from app.runtime import Runtime
from app.schemas.events import ResponseLifecycleEvent
from app.schemas.responses import TERMINAL_STATUSES
from app.services.snapshots import response_from_row

# NOTE: `response.cancelled` is not in the SDK's event union; it ends the stream of a cancelled background response.
TERMINAL_EVENT_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed", "response.cancelled"})
#: How long to wait for a live event before asking the database whether the response has ended meanwhile.
LIVE_POLL_S = 1.0
#: How long a live stream waits, once the database says the response has ended, for the events that the
#: executor publishes right after committing the final state.
TERMINAL_GRACE_S = 5.0


async def _stored_events(runtime: Runtime, response_id: str, after: int) -> list[dict[str, Any]]:
    async with runtime.sessionmaker() as session:
        return await repository.events_after(session, response_id, after)


async def _has_ended(runtime: Runtime, response_id: str) -> bool:
    async with runtime.sessionmaker() as session:
        status = await repository.get_status(session, response_id)
    return status is None or status in TERMINAL_STATUSES


async def _stored_terminal_event(runtime: Runtime, response_id: str, sequence_number: int) -> dict[str, Any] | None:
    """A terminal event built from the stored final state, for a stream whose live terminal event never came."""
    async with runtime.sessionmaker() as session:
        row = await repository.get_by_id(session, response_id)
    if row is None or row.status not in TERMINAL_STATUSES:
        return None
    event = ResponseLifecycleEvent(
        type=f"response.{row.status}", sequence_number=sequence_number, response=response_from_row(row)
    )
    return event.model_dump(mode="json")


async def _finish_live(
    runtime: Runtime, response_id: str, subscription: Subscription, last: int
) -> AsyncIterator[dict[str, Any]]:
    """The rest of a live stream whose response has ended in the database.

    The final state is committed before its last events are published, so they are usually on their way:
    relay them, and end with a terminal event built from the stored row if they do not come.
    """
    deadline = anyio.current_time() + TERMINAL_GRACE_S
    while (remaining := deadline - anyio.current_time()) > 0:
        live = await subscription.next(remaining)
        if live is None:
            break
        if live["sequence_number"] <= last:
            continue
        yield live
        last = live["sequence_number"]
        if live["type"] in TERMINAL_EVENT_TYPES:
            return
    terminal = await _stored_terminal_event(runtime, response_id, last + 1)
    if terminal is not None:
        yield terminal


async def relay_events(
    runtime: Runtime,
    response_id: str,
    subscription: Subscription,
    *,
    after: int,
    replay: bool,
    stored: bool,
    cancel_on_exit: bool,
) -> AsyncIterator[dict[str, Any]]:
    """Events with sequence_number > `after`, in order, without gaps or repeats, up to the terminal one.

    `replay`: the events are stored too (background + stream), so gaps in the live feed are filled from the
    database. `stored`: the response has a row whose status tells when it ended without a live terminal event
    reaching us. `cancel_on_exit`: a foreground stream, whose generation stops when its client goes away.
    """
    last = after
    ended = False
    try:
        if replay:
            for event in await _stored_events(runtime, response_id, last):
                yield event
                last = event["sequence_number"]
                if event["type"] in TERMINAL_EVENT_TYPES:
                    ended = True
                    return
        while True:
            live = await subscription.next(LIVE_POLL_S)
            if live is None:
                if stored and await _has_ended(runtime, response_id):
                    if replay:
                        for missed in await _stored_events(runtime, response_id, last):
                            yield missed
                    else:
                        async for rest in _finish_live(runtime, response_id, subscription, last):
                            yield rest
                    ended = True
                    return
                continue
            sequence = live["sequence_number"]
            if sequence <= last:
                continue
            if replay and sequence > last + 1:
                for missed in await _stored_events(runtime, response_id, last):
                    if missed["sequence_number"] >= sequence:
                        break
                    yield missed
            yield live
            last = sequence
            if live["type"] in TERMINAL_EVENT_TYPES:
                ended = True
                return
    finally:
        with anyio.CancelScope(shield=True):
            await subscription.close()
            if not ended and cancel_on_exit:
                await runtime.queue.cancel(response_id)
