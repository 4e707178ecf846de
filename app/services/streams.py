"""Relaying one response's events to a client: stored ones first (replay), then live ones, each exactly once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio

from app.db.repositories import responses as repository
from app.queue.base import Subscription
from app.runtime import Runtime
from app.schemas.responses import TERMINAL_STATUSES

# NOTE: `response.cancelled` is not in the SDK's event union; it ends the stream of a cancelled background response.
TERMINAL_EVENT_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed", "response.cancelled"})
#: How long to wait for a live event before asking the database whether the response has ended meanwhile.
LIVE_POLL_S = 1.0


async def _stored_events(runtime: Runtime, response_id: str, after: int) -> list[dict[str, Any]]:
    async with runtime.sessionmaker() as session:
        return await repository.events_after(session, response_id, after)


async def _has_ended(runtime: Runtime, response_id: str) -> bool:
    async with runtime.sessionmaker() as session:
        status = await repository.get_status(session, response_id)
    return status is None or status in TERMINAL_STATUSES


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
