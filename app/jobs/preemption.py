"""A running background job preempted for another tenant's interactive one (app/transport/fair_order.py's waiting
room asks): its run stops at the next boundary between two tokens, stores its progress and gives the job back to
the queue, `queued` again (lease.py's hand_back); a later run takes it over from there, as after a worker's stop,
so that its output and events go on with nothing lost or repeated."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from app.generation.types import Finish, GenerationFailed


class Preempted(Exception):
    """A preemption came between two tokens: the run stops there and hands its job back."""


async def until_preempted(outputs: AsyncIterator[Any], preempted: asyncio.Event) -> AsyncIterator[Any]:
    """`outputs`, until `preempted` is set while the next one is awaited (between two tokens): then Preempted. The
    output in the making is dropped (the run is cancelled after): it was neither sent nor stored."""
    waiter = asyncio.ensure_future(preempted.wait())
    try:
        while True:
            step = asyncio.ensure_future(anext(outputs))
            await asyncio.wait((step, waiter), return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                step.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await step
                raise Preempted
            try:
                output = step.result()
            except StopAsyncIteration:
                return
            if isinstance(output, Finish | GenerationFailed):
                waiter.cancel()  # its last: the reader may never ask for more (and close this)
            yield output
    finally:
        waiter.cancel()
