"""Embedded mode's event bus: each subscriber gets every event of its response in order, once; a wait ends with
the next event, or with None after its timeout; a subscriber that leaves gets no more."""

from __future__ import annotations

import asyncio

from app.transport.memory_bus import MemoryBus


async def test_events_come_in_order_whether_they_wait_or_the_subscriber_does() -> None:
    bus = MemoryBus()
    first, second = await bus.subscribe("resp_1"), await bus.subscribe("resp_1")
    other = await bus.subscribe("resp_2")
    await bus.publish("resp_1", {"sequence_number": 0})
    await bus.publish("resp_1", {"sequence_number": 1})
    assert await first.next(1.0) == {"sequence_number": 0}
    waiting = asyncio.create_task(second.next(5.0))
    assert await waiting == {"sequence_number": 0}
    assert await second.next(1.0) == {"sequence_number": 1}
    waiting = asyncio.create_task(second.next(5.0))
    await asyncio.sleep(0)  # the subscriber waits now
    await bus.publish("resp_1", {"sequence_number": 2})
    assert await waiting == {"sequence_number": 2}
    assert await first.next(1.0) == {"sequence_number": 1}
    assert await first.next(1.0) == {"sequence_number": 2}
    assert await other.next(0.01) is None


async def test_a_wait_times_out_and_a_cancelled_one_loses_nothing() -> None:
    bus = MemoryBus()
    subscription = await bus.subscribe("resp_1")
    assert await subscription.next(0.01) is None
    waiting = asyncio.create_task(subscription.next(5.0))
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await bus.publish("resp_1", {"sequence_number": 0})
    assert await subscription.next(1.0) == {"sequence_number": 0}
    await subscription.close()
    await bus.publish("resp_1", {"sequence_number": 1})
    assert bus.subscribers == {}
    assert await subscription.next(0.01) is None
