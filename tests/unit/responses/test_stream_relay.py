"""A live stream must end with its terminal event even when the database learns of the end first."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from app.events.terminal import TERMINAL_EVENT_TYPES
from app.jobs.execution import JobExecutor
from app.responses import relay
from app.runtime import Runtime
from app.testing.sse import parse_sse
from app.transport.inprocess import InProcessQueue
from app.transport.memory_bus import MemoryBus
from tests.protocol import assert_well_formed_stream


class LateBus(MemoryBus):
    """Delivers the events of a response's final batch (everything after its first text delta) late, or never."""

    def __init__(self, delay_s: float, drop_terminal: bool = False) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.drop_terminal = drop_terminal

    async def publish(self, response_id: str, event: dict[str, Any]) -> None:
        if event["type"] in TERMINAL_EVENT_TYPES or event["type"].endswith(".done"):
            if self.drop_terminal and event["type"] in TERMINAL_EVENT_TYPES:
                return
            await asyncio.sleep(self.delay_s)
        await super().publish(response_id, event)


def use_bus(runtime: Runtime, bus: MemoryBus) -> None:
    """Where the jobs publish and the relays subscribe."""
    assert isinstance(runtime.queue, InProcessQueue) and isinstance(runtime.queue.executor, JobExecutor)
    runtime.queue.bus = runtime.queue.executor.bus = bus


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay, "LIVE_POLL_S", 0.02)
    monkeypatch.setattr(relay, "TERMINAL_GRACE_S", 0.5)


async def test_events_published_after_the_final_commit_still_reach_the_stream(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    # The executor commits the final state, then publishes: a relay that polls in between must wait for them.
    use_bus(app_runtime, LateBus(delay_s=0.1))
    reply = await client.post("/v1/responses", json={"input": "hello", "stream": True})
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert events[-1]["type"] == "response.completed"
    assert final == (await client.get(f"/v1/responses/{final['id']}")).json()


async def test_a_terminal_event_that_never_comes_is_rebuilt_from_the_stored_response(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    use_bus(app_runtime, LateBus(delay_s=0.0, drop_terminal=True))
    reply = await client.post("/v1/responses", json={"input": "hello", "stream": True})
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert events[-1]["type"] == "response.completed"
    assert final == (await client.get(f"/v1/responses/{final['id']}")).json()
