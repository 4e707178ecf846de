"""A non-streaming route whose answer waits on a generation stops that generation when its client goes away.

Starlette cancels a streaming response when its client leaves (the relay's own cleanup then stops the generation),
but a plain response's handler runs on to the end: a JSON create or a compaction nobody waits for any more would
keep its model slot busy, and the response would end as if it had been read."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import anyio
from fastapi import Request

from app.errors import ClientGone

T = TypeVar("T")


async def _cancel_when_gone(request: Request, scope: anyio.CancelScope) -> None:
    # The body is read: what the server receives next is the client's leaving (none while it waits).
    while (await request.receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def unless_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result; ClientGone once the client has disconnected, `work` cancelled (its cleanup runs, as on
    any cancellation: the relay stops the generation it follows)."""
    scope = anyio.CancelScope()
    # NOTE: a plain task, not a task group: an error of `work` (a 4xx) must reach the error handlers as it is.
    watcher = asyncio.create_task(_cancel_when_gone(request, scope))
    try:
        with scope:
            return await work
    finally:
        watcher.cancel()
    raise ClientGone()
